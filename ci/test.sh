#!/usr/bin/env bash
# The whole test suite: Python (pytest) and the C runtime (cmocka under ASan/UBSan), after
# ci/setup.sh --test (system packages, the .venv, the runtime libraries).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh --test
# everything runs with the environment's interpreter (ci/setup.sh made it; PEP 668 systems
# refuse packages in their own), its scripts first on PATH
VENV=${RG_VENV:-.venv}
PY=$VENV/bin/python
export PATH="$(cd "$VENV/bin" && pwd -P):$PATH"

echo "== lint =="
$PY -m ruff check rubikgen tests ci bench
$PY -m ruff format --check rubikgen tests ci bench
echo "== layering (import-linter contracts in setup.cfg) =="
$PY -c 'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())'
echo "== types (mypy; configuration in setup.cfg) =="
$PY -m mypy
echo "== specs =="
$PY -m rubikgen validate --strict specs/
echo "== schema freshness =="
$PY -m rubikgen schema --out schema --check
if [ -f runtime-c/Makefile ]; then
  echo "== C style (clang-format; runtime-c/.clang-format) =="
  make -s -C runtime-c format-check
  echo "== C runtime (cmocka, ASan/UBSan) =="
  # the objects compile two at a time (the machines' two cores); the suites still run in turn
  make -s -j"${RG_TEST_JOBS:-2}" -C runtime-c test
  echo "== fuzz smoke (libFuzzer, ASan/UBSan) =="
  bash ci/fuzz-smoke.sh
fi
echo "== pytest =="
# the runtime archives first, so that tests running side by side only read them
make -s -j"${RG_TEST_JOBS:-2}" -C runtime-c lib asan-lib
# two workers (the machines have two cores); a test file runs on one worker, so its
# module-scoped builds are made once.  Then the timing-sensitive tests (live capture fed by
# tcpreplay, paced input), alone, so that the other worker's load cannot make a kernel drop.
$PY -m pytest -n "${RG_TEST_JOBS:-2}" --dist loadfile -m "not serial" --durations=15
$PY -m pytest -m serial
