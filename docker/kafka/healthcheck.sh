#!/bin/bash
# The image's HEALTHCHECK: a broker listener of $KAFKA_LISTENERS accepts connections on this host
# (the controller listeners are left out: they answer before the broker does).
listeners=${KAFKA_LISTENERS:-PLAINTEXT://:9092,CONTROLLER://:9093}
controllers=,${KAFKA_CONTROLLER_LISTENER_NAMES:-CONTROLLER},
IFS=, read -ra all <<< "$listeners"
for listener in "${all[@]}"; do
  name=${listener%%://*}
  case $controllers in *,"$name",*) continue ;; esac
  port=${listener##*:}
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then exit 0; fi
done
echo "no broker listener of $listeners answers on 127.0.0.1"
exit 1
