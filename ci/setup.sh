#!/usr/bin/env bash
# Installs what rubikgen needs on a fresh Debian/Ubuntu machine. Idempotent: packages already
# present are not fetched again.
#
#   bash ci/setup.sh           the quick start's needs: a C toolchain, libpcap, libyaml, libssl,
#                              Graphviz; a virtual environment (.venv) holding this checkout's
#                              rubikgen package (editable); the C runtime libraries
#   bash ci/setup.sh --test    also what the test suite needs (cmocka, tshark, DPDK, clang and
#                              libFuzzer, clang-format, Hyperscan, libnids, valgrind, tcpreplay,
#                              ...; the test extras of the Python package)
#   --check                    installs nothing: exits 0 when everything of the chosen set is
#                              present (system packages, the package in .venv, the runtime
#                              libraries), 1 otherwise
#   --python-only              the virtual environment step alone
#
# The Python package goes into a virtual environment, never into the system interpreter: on
# Debian 12 and Ubuntu 23.04 or later that interpreter is externally managed (PEP 668) and pip
# refuses to install into it. PYTHON names the interpreter the environment is made from
# (default python3), RG_VENV where it goes (default .venv). The environment sees the system's
# site packages (--system-site-packages), so that what is installed there is not fetched again.
set -euo pipefail
CHECK=0 TEST=0 PYONLY=0
for a in "$@"; do
  case "$a" in
    --check) CHECK=1 ;;
    --test) TEST=1 ;;
    --python-only) PYONLY=1 ;;
    *) echo "usage: bash ci/setup.sh [--test] [--check] [--python-only]" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."

QUICK_PACKAGES=(
  build-essential pkg-config
  libpcap-dev                     # built stacks read captures and interfaces with libpcap
  libyaml-dev                     # runtime-c: the driver reads NF chain files (--chain) with libyaml
  libssl-dev                      # runtime-c: libcrypto (HKDF, AES-GCM, AES-ECB) for QUIC Initial decryption
  graphviz                        # rubikgen graph --format svg (the quick start draws two diagrams)
)
TEST_PACKAGES=(
  libcmocka-dev                   # runtime-c unit tests
  python3-dev                     # rubikgen.bindings: Python.h for the stack extension modules
  tshark                          # reference oracle in end-to-end tests
  libnids-dev libhyperscan-dev libpcre2-dev valgrind  # benchmarks: libnids peers (make -C bench peers), Hyperscan (SF workload; the signatures NF, optional), callgrind
  libdpdk-dev                     # runtime-c: the "dpdk" packet source (its pcap/ring/null vdevs run the tests without a NIC)
  time                            # tests/runtime/test_flood_memory.py: peak RSS of a run (GNU time -f %M)
  logrotate                       # tests/runtime/test_out_records.py: a real logrotate -f rotates the NFs' line outputs (create + postrotate reopen)
  tcpreplay iproute2              # tests/runtime/test_sources.py: replay captures into a veth pair in a network namespace
  tcpdump ethtool curl            # captures/make-quickstart-capture.sh: records the quick start's capture
  systemd                         # tests/runtime/test_systemd_unit.py: systemd-analyze verify of docs/examples/rubikgen@.service
  clang-14 libfuzzer-14-dev libclang-rt-14-dev  # fuzz smoke (ci/fuzz-smoke.sh): libFuzzer + ASan/UBSan runtimes
  clang-format-14                 # C style: make -C runtime-c format-check (ci/test.sh)
  libbpf-dev libxdp-dev bpftool llvm-14  # rubikgen build --xdp (clang-14 -target bpf) and tests/e2e/test_xdp.py's libbpf runner
)
APT_PACKAGES=("${QUICK_PACKAGES[@]}")
((TEST)) && APT_PACKAGES+=("${TEST_PACKAGES[@]}")

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
apt_install() {
  echo "setup: installing $*"
  # tshark asks whether non-root users may capture; answer non-interactively.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections || true
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! ((PYONLY)); then
  missing=()
  # one dpkg-query for all packages: the quick path runs no apt at all
  mapfile -t status < <(dpkg-query -W -f='${Package} ${Status}\n' "${APT_PACKAGES[@]}" 2>/dev/null || true)
  for p in "${APT_PACKAGES[@]}"; do
    printf '%s\n' "${status[@]}" | grep -qx "$p install ok installed" || missing+=("$p")
  done
  if ((CHECK)); then
    ((${#missing[@]} == 0)) || { echo "setup: missing ${missing[*]}"; exit 1; }
  elif ((${#missing[@]})); then
    apt_install "${missing[@]}"
  fi
fi

PY=${PYTHON:-python3}
VENV=${RG_VENV:-.venv}
HERE=$(pwd -P)
VPY=$VENV/bin/python
case "$VENV" in /*) ;; *) VPY=$HERE/$VENV/bin/python ;; esac  # also from / (below)
EXTRA=""
MODULES="rubikgen, lark, pydantic, yaml, jinja2, scapy, Cython"
if ((TEST)); then
  EXTRA="[test]"
  MODULES="$MODULES, hypothesis, tomli_w, jsonschema, build, wheel, pre_commit, importlinter, mypy, atheris, xdist, dns"
fi
# The package in the environment must be this checkout's (another clone may have installed its own).
installed=$(cd / && "$VPY" -c "import os, $MODULES; print(os.path.dirname(os.path.dirname(os.path.realpath(rubikgen.__file__))))" 2>/dev/null || true)
if ((CHECK)); then
  [ "$installed" = "$HERE" ] || { echo "setup: the rubikgen package of this checkout is not installed in $VENV"; exit 1; }
  ((PYONLY)) || [ ! -f runtime-c/Makefile ] || make -s -q -C runtime-c lib || { echo "setup: runtime libraries to build"; exit 1; }
  exit 0
fi
if ! "$VPY" -c 'import sys' 2>/dev/null; then
  rm -rf "$VENV"
  echo "setup: creating the virtual environment $VENV ($PY)"
  if ! "$PY" -m venv --system-site-packages "$VENV" >/dev/null 2>&1; then
    # Debian and Ubuntu ship venv's pip bootstrap (ensurepip) in python3-venv
    rm -rf "$VENV"
    ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    pkgs=(python3-venv)
    apt-cache show "python$ver-venv" >/dev/null 2>&1 && pkgs+=("python$ver-venv")
    apt_install "${pkgs[@]}"
    "$PY" -m venv --system-site-packages "$VENV"
  fi
fi
if [ "$installed" != "$HERE" ] || [ "${RUBIKGEN_REINSTALL:-}" = 1 ]; then
  echo "setup: installing the rubikgen Python package (editable${EXTRA:+, with test extras}) into $VENV"
  "$VPY" -m pip install -q --disable-pip-version-check -e ".$EXTRA"
fi
if ! ((PYONLY)) && [ -f runtime-c/Makefile ]; then
  # The C runtime and network-function libraries every built stack links against.
  echo "setup: building the C runtime libraries (make -s -C runtime-c lib)"
  make -s -C runtime-c lib
fi
echo "setup: done; activate the environment with: . $VENV/bin/activate"
