#!/bin/bash
# KAFKA_* environment variables -> server.properties (as in apache/kafka: KAFKA_FOO_BAR -> foo.bar,
# "__" -> "_", "___" -> "-"), format the log directory once, then run the broker in the foreground.
# Defaults make a single combined node answering on 9092 with no variables at all.
set -euo pipefail
conf=/opt/kafka/config/server.properties
: "${KAFKA_NODE_ID:=1}"
: "${KAFKA_PROCESS_ROLES:=broker,controller}"
: "${KAFKA_LISTENERS:=PLAINTEXT://:9092,CONTROLLER://:9093}"
: "${KAFKA_ADVERTISED_LISTENERS:=PLAINTEXT://localhost:9092}"
: "${KAFKA_CONTROLLER_LISTENER_NAMES:=CONTROLLER}"
: "${KAFKA_LISTENER_SECURITY_PROTOCOL_MAP:=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT}"
: "${KAFKA_CONTROLLER_QUORUM_VOTERS:=${KAFKA_NODE_ID}@localhost:9093}"
: "${KAFKA_LOG_DIRS:=/var/lib/kafka/data}"
: "${KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR:=1}"
: "${KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR:=1}"
: "${KAFKA_TRANSACTION_STATE_LOG_MIN_ISR:=1}"
: "${KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR:=1}"
: "${KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR:=1}"
: "${KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS:=0}"
: "${CLUSTER_ID:=5L6g3nShT-eMCtK--X86sw}"  # the official image's default
export KAFKA_NODE_ID KAFKA_PROCESS_ROLES KAFKA_LISTENERS KAFKA_ADVERTISED_LISTENERS \
  KAFKA_CONTROLLER_LISTENER_NAMES KAFKA_LISTENER_SECURITY_PROTOCOL_MAP KAFKA_CONTROLLER_QUORUM_VOTERS \
  KAFKA_LOG_DIRS KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR \
  KAFKA_TRANSACTION_STATE_LOG_MIN_ISR KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR \
  KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS

: > "$conf"
for var in $(compgen -e | grep '^KAFKA_' | sort); do
  case $var in  # the JVM's settings, not broker properties
    KAFKA_HEAP_OPTS|KAFKA_JVM_PERFORMANCE_OPTS|KAFKA_OPTS|KAFKA_LOG4J_OPTS|KAFKA_VERSION) continue ;;
  esac
  name=${var#KAFKA_}
  name=${name,,}
  name=${name//___/-}
  name=${name//__/@}
  name=${name//_/.}
  name=${name//@/_}
  printf '%s=%s\n' "$name" "${!var}" >> "$conf"
done

java=(java ${KAFKA_HEAP_OPTS:--Xmx512m -Xms128m} ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseSerialGC}
      ${KAFKA_OPTS:-} -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties -cp '/opt/kafka/libs/*')
# A static quorum (controller.quorum.voters): format needs the cluster id only; --ignore-formatted
# keeps a restarted container's data.
"${java[@]}" kafka.tools.StorageTool format --ignore-formatted -t "$CLUSTER_ID" -c "$conf"
exec "${java[@]}" kafka.Kafka "$conf"
