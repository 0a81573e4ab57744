#!/usr/bin/env bash
# Installs every system and Python dependency rubikgen needs on a fresh Debian machine.
# Idempotent: packages already present are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential pkg-config
  libpcap-dev libcmocka-dev       # runtime-c: capture driver, unit tests; built stacks link libpcap
  libssl-dev                      # runtime-c: libcrypto (HKDF, AES-GCM, AES-ECB) for QUIC Initial decryption
  graphviz                        # rubikgen graph --format svg
  tshark                          # reference oracle in end-to-end tests
  libnids-dev libhyperscan-dev libpcre2-dev valgrind  # benchmarks: libnids peers (make -C bench peers), Hyperscan (SF workload), callgrind
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
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
installed=$(cd / && $PY -c 'import os, rubikgen, lark, hypothesis, tomli_w, jsonschema, scapy; print(os.path.dirname(os.path.dirname(os.path.realpath(rubikgen.__file__))))' 2>/dev/null || true)
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
