#!/usr/bin/env bash
# A few Spark tests on the oldest supported PySpark (pyproject: pyspark>=4.1); the newest (the one
# in constraints.txt) ran the whole suite. On that release: Spark's Kafka connector of the same
# version (reliable_kafka.spark.connector, resolved by Maven on first use), reliable-kafka's Java
# sources compiled against its jars (each must compile: a source left out fails the stage), the
# single query (also in real-time mode), the foreachBatch spout with batch plan reuse, and a Spark
# bolt between Python components, on the embedded broker.
# The virtual environment is kept in the jar cache's folder, one per PySpark release, and reused
# (pip runs again only when pyproject.toml, constraints.txt or the checkout's path changed); a lock
# keeps two checkouts from installing into it at once. A skipped test fails the stage.
#   RK_CI_SPARK_VERSIONS="4.1.3"   the PySpark releases (default: the oldest supported whose
#                                  connector Maven Central serves; 4.1.4's is not there)
#   RK_CI_SPARK_TESTS="tests/..."  the tests (default: below)
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD
versions=${RK_CI_SPARK_VERSIONS:-4.1.3}
# the single query (micro-batches, and real-time mode, which PySpark 4.1 reaches through the JVM's
# Trigger.RealTime), the spout's foreachBatch path with plan reuse and the Java functions, the SQL
# functions against the Python port, and a Spark bolt between Python components
tests=${RK_CI_SPARK_TESTS:-"tests/integration/test_spark_single_query.py::test_single_query_commits_only_completed_trees_and_redelivers_failures \
tests/integration/test_spark_single_query.py::test_real_time_mode_tracks_every_record \
tests/integration/test_spark_spout.py::test_commits_only_completed_trees_and_redelivers_downstream_failures \
tests/integration/test_spark_spout.py::test_ids_derived_by_spark_match_the_python_port \
tests/integration/test_spark_bolt.py::test_python_spout_spark_bolt_python_bolt"}
cache=${RK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/reliable-kafka}
python=${RK_PYTHON:-}
if [ -z "$python" ]; then
  for candidate in python3.11 python3.12 python3.13 python3.10 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then python=$candidate; break; fi
  done
fi
log=$(mktemp -t rk-spark-versions.XXXXXX)
constraints=$(mktemp -t rk-spark-constraints.XXXXXX)
trap 'rm -f "$log" "$constraints"' EXIT
for version in $versions; do
  venv=$cache/venv-pyspark-$version
  mkdir -p "$cache"
  exec 9>"$cache/.venv-pyspark-$version.lock"
  flock 9
  grep -v '^pyspark==' constraints.txt >"$constraints"
  echo "pyspark==$version" >>"$constraints"
  want=$( (cat pyproject.toml "$constraints"; echo "$here") | sha256sum | cut -c1-16)
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.rk-installed" 2>/dev/null)" != "$want" ]; then
    echo "== PySpark $version: installing reliable-kafka into $venv =="
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet --constraint "$constraints" --editable "$here[test]"
    echo "$want" >"$venv/.rk-installed"
  fi
  echo "== PySpark $version: the Kafka connector and reliable-kafka's Java sources =="
  "$venv/bin/python" - "$version" <<'EOF'
import sys

import pyspark

from reliable_kafka.spark.connector import connector_jars
from reliable_kafka.spark.jvm_functions import functions_jar, lost

assert pyspark.__version__ == sys.argv[1], f"the venv runs PySpark {pyspark.__version__}, not {sys.argv[1]}"
for jar in connector_jars():
    print(f"  {jar.name}")
jar = functions_jar()
if lost(jar):
    sys.exit(f"spark-versions: PySpark {sys.argv[1]}: {lost(jar)}")
print(f"  {jar.name}: every Java source compiled against Spark {pyspark.__version__}")
EOF
  echo "== Spark tests on PySpark $version (RK_KAFKA=embedded) =="
  # shellcheck disable=SC2086
  RK_KAFKA=embedded "$venv/bin/python" -m pytest -ra -p no:cacheprovider --durations=5 $tests 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  exec 9>&-
  if [ "$status" != 0 ]; then exit "$status"; fi
  if grep -Eq "^=+ .*[0-9]+ skipped" "$log"; then
    echo "spark-versions: tests were skipped on PySpark $version (see the summary above)" >&2
    exit 1
  fi
done
