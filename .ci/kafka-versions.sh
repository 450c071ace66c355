#!/usr/bin/env bash
# The integration core on every tested Kafka release other than the default (the main suite ran on
# that one): the topology (spouts, bolts, ackers, DLQ, replays, rebalances) and transactions on
# each, and the Spark source on the oldest, each on an embedded broker of that version (RK_KAFKA_VERSION; its jars resolved by Maven on first use), and
# the check that tells a broker's release (test_broker_versions.py).
# One version at a time (a broker each); a skipped test fails the stage, as a skip would hide a
# version the core does not run on.
#   RK_CI_KAFKA_VERSIONS="3.9.1 4.1.1"  the versions (default: jars.TESTED_KAFKA_VERSIONS minus the default)
#   RK_CI_KAFKA_CORE="tests/..."        the tests (default: the core below)
#   RK_CI_KAFKA_SPARK="tests/..."       run on the oldest version as well (default: the Spark source)
set -euo pipefail
cd "$(dirname "$0")/.."
./rk --help >/dev/null  # the venv
python=${RK_VENV:-.venv}/bin/python
versions=${RK_CI_KAFKA_VERSIONS:-$("$python" -c 'from reliable_kafka.jars import KAFKA_VERSION, TESTED_KAFKA_VERSIONS as T; print(" ".join(v for v in T if v != KAFKA_VERSION))')}
core=${RK_CI_KAFKA_CORE:-tests/integration/test_broker_versions.py tests/integration/test_topology.py tests/integration/test_transactional.py}
# Spark's Kafka source on the oldest tested release too (the newest ran it in the whole suite)
spark=${RK_CI_KAFKA_SPARK:-tests/integration/test_spark_spout.py}
oldest=$("$python" -c 'from reliable_kafka.jars import TESTED_KAFKA_VERSIONS as T, parse_kafka_version as p; print(min(T, key=p))')
log=$(mktemp -t rk-kafka-versions.XXXXXX)
trap 'rm -f "$log"' EXIT
for version in $versions; do
  echo "== integration core on Kafka $version (RK_KAFKA=embedded RK_KAFKA_VERSION=$version) =="
  # shellcheck disable=SC2086
  tests=$core
  if [ "$version" = "$oldest" ]; then tests="$tests $spark"; fi
  RK_KAFKA=embedded RK_KAFKA_VERSION=$version ./rk test -ra -p no:cacheprovider $tests 2>&1 | tee "$log"
  if grep -Eq "^=+ .*[0-9]+ skipped" "$log"; then
    echo "kafka-versions: tests were skipped on Kafka $version (see the summary above)" >&2
    exit 1
  fi
done
