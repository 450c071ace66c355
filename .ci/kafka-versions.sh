#!/usr/bin/env bash
# The integration core on every tested Kafka release other than the default (the main suite ran on
# that one): the topology (spouts, bolts, ackers, DLQ, replays, rebalances), transactions and the
# Spark source, each on an embedded broker of that version (RK_KAFKA_VERSION; its jars resolved by Maven on first use), and
# the check that tells a broker's release (test_broker_versions.py).
# One version at a time (a broker each); a skipped test fails the stage, as a skip would hide a
# version the core does not run on.
#   RK_CI_KAFKA_VERSIONS="3.9.1 4.1.1"  the versions (default: jars.TESTED_KAFKA_VERSIONS minus the default)
#   RK_CI_KAFKA_CORE="tests/..."        the tests (default: the core below)
set -euo pipefail
cd "$(dirname "$0")/.."
./rk --help >/dev/null  # the venv
python=${RK_VENV:-.venv}/bin/python
versions=${RK_CI_KAFKA_VERSIONS:-$("$python" -c 'from reliable_kafka.jars import KAFKA_VERSION, TESTED_KAFKA_VERSIONS as T; print(" ".join(v for v in T if v != KAFKA_VERSION))')}
core=${RK_CI_KAFKA_CORE:-tests/integration/test_broker_versions.py tests/integration/test_topology.py tests/integration/test_transactional.py tests/integration/test_spark_spout.py}
log=$(mktemp -t rk-kafka-versions.XXXXXX)
trap 'rm -f "$log"' EXIT
for version in $versions; do
  echo "== integration core on Kafka $version (RK_KAFKA=embedded RK_KAFKA_VERSION=$version) =="
  # shellcheck disable=SC2086
  RK_KAFKA=embedded RK_KAFKA_VERSION=$version ./rk test -ra -p no:cacheprovider $core 2>&1 | tee "$log"
  if grep -Eq "^=+ .*[0-9]+ skipped" "$log"; then
    echo "kafka-versions: tests were skipped on Kafka $version (see the summary above)" >&2
    exit 1
  fi
done
