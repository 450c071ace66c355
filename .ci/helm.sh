#!/usr/bin/env bash
# Helm for the chart's checks: installs Helm (a Go module, through the Go proxy) once into
# ~/.cache/reliable-kafka/helm/bin, then `helm lint` and `helm template` deploy/helm/reliable-kafka
# with its values.schema.json: the defaults, a full set of values, and values the chart must refuse.
#   .ci/helm.sh           install if needed, then check
#   .ci/helm.sh --path    install if needed, print the helm binary's path
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
version=v3.22.0
bin=${RK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/reliable-kafka}/helm/$version
helm=$bin/helm
if [ ! -x "$helm" ]; then
  command -v go >/dev/null || { echo "helm.sh: Go is needed to install Helm $version" >&2; exit 1; }
  echo "helm.sh: go install helm.sh/helm/v3/cmd/helm@$version (once; into $bin)" >&2
  mkdir -p "$bin"
  GOBIN=$bin go install "helm.sh/helm/v3/cmd/helm@$version" >&2
fi
if [ "${1:-}" = "--path" ]; then echo "$helm"; exit 0; fi

chart=$here/deploy/helm/reliable-kafka
example=$(mktemp)
trap 'rm -f "$example"' EXIT
cat > "$example" <<'VALUES'
topology: {name: orders, bootstrapServers: "b1:9093,b2:9093", ackers: 6, replicationFactor: 3, minInsyncReplicas: 2, createTopics: false}
security: {existingSecret: kafka-client, propertiesKey: client.properties}
ackers: {replicas: 3, kafkaConfig: {client.rack: eu-1a}}
serviceMonitor: {enabled: true}
components:
  - {name: reader, kind: spout, image: "example/orders:1", command: [python, -m, orders.reader], replicas: 2, partitions: 6}
  - {name: enrich, kind: bolt, image: "example/orders:1", command: [python, -m, orders.enrich], partitions: 6}
VALUES

"$helm" lint --strict "$chart"
"$helm" lint --strict "$chart" -f "$example"
"$helm" template rk "$chart" >/dev/null
"$helm" template rk "$chart" -f "$example" >/dev/null
refuse() {  # refuse WHY EXPECTED ARGS...: the chart (template or schema) must refuse these values, saying EXPECTED
  local why=$1 expected=$2; shift 2
  if out=$("$helm" template rk "$chart" "$@" 2>&1); then
    echo "helm.sh: the chart accepted $why ($*)" >&2; exit 1
  fi
  if ! grep -qF -- "$expected" <<< "$out"; then
    echo "helm.sh: $why refused, but without saying \"$expected\":" >&2; echo "$out" >&2; exit 1
  fi
  echo "refused as it should ($why): $(grep -F -- "$expected" <<< "$out" | head -1)"
}
refuse "more acker replicas than ack partitions" "ackers.replicas (5) may not exceed topology.ackers (4)" \
  --set ackers.replicas=5 --set topology.ackers=4
refuse "a component with more replicas than partitions" "components[reader].replicas (7) may not exceed" \
  -f "$example" --set 'components[0].replicas=7'
refuse "a bootstrap without a port (schema)" "/topology/bootstrapServers" --set topology.bootstrapServers=kafka
refuse "a string replication factor (schema)" "/topology/replicationFactor" --set-string topology.replicationFactor=three
refuse "an unknown component kind (schema)" "/components/1/kind" -f "$example" --set 'components[1].kind=sink'
echo "helm.sh: lint and template passed ($("$helm" version --short))"
