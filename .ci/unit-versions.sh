#!/usr/bin/env bash
# The unit tests (tests/unit: they start nothing) on the other Python versions the package supports
# (pyproject: requires-python >= 3.10). Each version gets its own virtual environment in the
# checkout, .venv-py<version> (./rk makes it, from constraints.txt, whose markers pick the releases
# that still support Python 3.10; pip's cache keeps the downloads). Not a shared one: the package
# is installed editable, so a venv made for another checkout would import that checkout's code. A version that is not installed fails the stage under CI and is
# skipped with a line saying so elsewhere. The versions run side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
versions=${RK_CI_PYTHONS:-3.10 3.13}
# The versions run side by side (the unit tests are one process each and the machine has two
# cores or more), each into its own log, printed whole when it ends; the stage fails if any did.
logs=$(mktemp -d -t rk-unit-versions.XXXXXX)
trap 'rm -rf "$logs"' EXIT
pids=()
for version in $versions; do
  python=
  # pyenv's interpreters first (its shims answer "command not found" for a version not selected)
  candidates=$(command -v pyenv >/dev/null 2>&1 && for v in $(pyenv versions --bare | grep -E "^${version//./\\.}(\.[0-9]+)?$"); do echo "$(pyenv root)/versions/$v/bin/python$version"; done || true)
  for candidate in $candidates "python$version"; do
    if "$candidate" -c "import sys; sys.exit(f'{sys.version_info[0]}.{sys.version_info[1]}' != '$version')" 2>/dev/null; then
      python=$candidate; break
    fi
  done
  if [ -z "$python" ]; then
    if [ "${CI:-}" = true ]; then echo "unit-versions: Python $version is not installed" >&2; exit 1; fi
    echo "unit-versions: Python $version is not installed: skipped"; continue
  fi
  echo "== unit tests on Python $version ($python): started =="
  # the simulation's 1,000 seeds a mode run on 3.11 in the main suite; 200 here keep the stage short
  (RK_SIM_SEEDS=${RK_SIM_SEEDS:-200} RK_PYTHON=$python RK_VENV=$PWD/.venv-py$version \
    RK_TEST_WORKERS=0 ./rk test tests/unit -q -p no:cacheprovider >"$logs/$version.log" 2>&1; echo $? >"$logs/$version.rc") &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || true; done
failed=
for version in $versions; do
  [ -f "$logs/$version.rc" ] || continue
  echo "== unit tests on Python $version =="
  cat "$logs/$version.log"
  if [ "$(cat "$logs/$version.rc")" != 0 ]; then failed="$failed $version"; fi
done
if [ -n "$failed" ]; then echo "unit-versions: the unit tests failed on Python$failed" >&2; exit 1; fi
