#!/usr/bin/env bash
# Installs every system and Python dependency rubikgen needs on a fresh Debian machine.
# Idempotent: packages already present are not fetched again.
# `bash ci/setup.sh --check` installs nothing: it exits 0 when everything is present (system
# packages, this checkout's Python package, built runtime libraries), 1 otherwise.
set -euo pipefail
CHECK=0
[ "${1:-}" = "--check" ] && CHECK=1
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential pkg-config
  libpcap-dev libcmocka-dev       # runtime-c: capture driver, unit tests; built stacks link libpcap
  libyaml-dev                     # runtime-c: the driver reads NF chain files (--chain) with libyaml
  libssl-dev                      # runtime-c: libcrypto (HKDF, AES-GCM, AES-ECB) for QUIC Initial decryption
  graphviz                        # rubikgen graph --format svg
  python3-dev                     # rubikgen.bindings: Python.h for the stack extension modules
  tshark                          # reference oracle in end-to-end tests
  libnids-dev libhyperscan-dev libpcre2-dev valgrind  # benchmarks: libnids peers (make -C bench peers), Hyperscan (SF workload; the signatures NF, optional), callgrind
  libdpdk-dev                     # runtime-c: the "dpdk" packet source (its pcap/ring/null vdevs run the tests without a NIC)
  time                            # tests/test_flood_memory.py: peak RSS of a run (GNU time -f %M)
  tcpreplay iproute2              # tests/test_sources.py: replay captures into a veth pair in a network namespace
  clang-14 libfuzzer-14-dev libclang-rt-14-dev  # fuzz smoke (ci/fuzz-smoke.sh): libFuzzer + ASan/UBSan runtimes
  clang-format-14                 # C style: make -C runtime-c format-check (ci/test.sh)
)

missing=()
# one dpkg-query for all packages: the quick path runs no apt at all
mapfile -t status < <(dpkg-query -W -f='${Package} ${Status}\n' "${APT_PACKAGES[@]}" 2>/dev/null || true)
for p in "${APT_PACKAGES[@]}"; do
  printf '%s\n' "${status[@]}" | grep -qx "$p install ok installed" || missing+=("$p")
done
if ((CHECK)); then
  ((${#missing[@]} == 0)) || { echo "setup: missing ${missing[*]}"; exit 1; }
elif ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  # tshark asks whether non-root users may capture; answer non-interactively.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections || true
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
HERE=$(pwd -P)
# The installed package must be this checkout (another clone may have installed its own).
installed=$(cd / && $PY -c 'import os, rubikgen, lark, hypothesis, tomli_w, jsonschema, scapy, build, wheel, pre_commit, importlinter, mypy, atheris; print(os.path.dirname(os.path.dirname(os.path.realpath(rubikgen.__file__))))' 2>/dev/null || true)
if ((CHECK)); then
  [ "$installed" = "$HERE" ] || { echo "setup: the rubikgen package of this checkout is not installed"; exit 1; }
  [ ! -f runtime-c/Makefile ] || make -s -q -C runtime-c lib || { echo "setup: runtime libraries to build"; exit 1; }
  exit 0
fi
if [ "$installed" != "$HERE" ] || [ "${RUBIKGEN_REINSTALL:-}" = 1 ]; then
  echo "setup: installing the rubikgen Python package (editable) with test extras"
  $PY -m pip install -q --disable-pip-version-check -e '.[test]'
fi
# The C runtime and network-function libraries every built stack links against.
if [ -f runtime-c/Makefile ]; then
  echo "setup: building the C runtime libraries (make -s -C runtime-c lib)"
  make -s -C runtime-c lib
fi
echo "setup: done"
