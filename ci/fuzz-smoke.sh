#!/usr/bin/env bash
# Fuzz smoke: build the libFuzzer harnesses of runtime-c/fuzz (ASan + UBSan + LSan) and run each
# for a bounded time from seeds cut out of real captures; any finding fails.
#
#   bash ci/fuzz-smoke.sh              every harness for RG_FUZZ_SECONDS (default 30) seconds
#   RG_FUZZ_SECONDS=3600 RG_FUZZ_STACKS="tcp_ip sctp" bash ci/fuzz-smoke.sh    a long run
#
#   RG_FUZZ_JOBS=1 bash ci/fuzz-smoke.sh   one compile or fuzzer at a time (default 2)
#
# Harnesses: fuzz_pcap (the capture reader), fuzz_reject (the replies of a reject), fuzz_control (the control socket's requests), fuzz_framer (the framer), fuzz_name (the domain name reader), ci/fuzz_specs.py (the spec front-end, atheris) and
# fuzz_stack for each stack of RG_FUZZ_STACKS
# (default: tcp_ip sctp quic: TCP/IP with IPv4/IPv6 fragments and TCP reassembly, SCTP, QUIC with
# Initial decryption; CI's time budget leaves the others, e.g. tcp_ip_tunnels, gtp, pptp,
# tcp_tls, to long runs).  The corpora grow in
# build/fuzz/corpus/NAME (kept between runs: a long run starts where the last one stopped);
# crashes land in build/fuzz/NAME-crash-* with the command to replay them.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${RG_FUZZ_SECONDS:-30}
STACKS=${RG_FUZZ_STACKS:-"tcp_ip sctp quic"}
RSS_MB=${RG_FUZZ_RSS_MB:-2048}
PY=${PYTHON:-python3}
CC=${FUZZ_CC:-$(command -v clang-14 || command -v clang || true)}
[ -n "$CC" ] || { echo "fuzz-smoke: clang is not installed (bash ci/setup.sh installs clang-14)"; exit 1; }
OUT=build/fuzz
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"
CFLAGS="-g -O1 -std=c11 -D_DEFAULT_SOURCE -Iruntime-c/include -Ihandlers/nf $SAN"
LIBS="-lpcap -lcrypto"
mkdir -p "$OUT/obj" "$OUT/corpus"

# RG_FUZZ_JOBS (default 2, the machines' cores) compiles and fuzzers run side by side; each
# fuzzer still gets its SECS on a core of its own
JOBS=${RG_FUZZ_JOBS:-${RG_TEST_JOBS:-2}}
throttle() { while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done; }
# a compile in the background; a failure is recorded (the statuses are checked after `wait`)
bg() { throttle; { "$@" || touch "$OUT/failed"; } & }
rm -f "$OUT/failed"
# out newer than every input: nothing to redo (a stack's generated C keeps its mtime while its
# text is unchanged, rubikgen/toolchain/build.py)
fresh() {
  local out=$1 f
  shift
  [ -e "$out" ] || return 1
  for f in "$@"; do [ "$out" -nt "$f" ] || return 1; done
}

# the runtime and the NFs, instrumented for coverage; rebuilt when a source or header changed
headers=(runtime-c/include/rg/*.h handlers/nf/*.h)
objs=()
for src in runtime-c/src/*.c handlers/nf/*.c; do
  # DPDK and AF_XDP: archives of their own (libdpdk, libxdp), not fuzzed here
  case "$src" in */rg_source_dpdk.c | */rg_source_afxdp.c) continue ;; esac
  o="$OUT/obj/$(basename "${src%.c}").o"
  fresh "$o" ci/fuzz-smoke.sh "$src" "${headers[@]}" || bg $CC $CFLAGS -fsanitize=fuzzer-no-link -c "$src" -o "$o"
  objs+=("$o")
done
wait
[ ! -e "$OUT/failed" ] || { echo "fuzz-smoke: compiling the runtime failed"; exit 1; }

$PY ci/fuzz_seeds.py "$OUT/seeds" >/dev/null
harnesses=()
# a harness: linked again when one of its inputs (sources, objects, headers) changed
harness() {
  local out=$1
  shift
  local deps=() a
  for a in "$@"; do [ -f "$a" ] && deps+=("$a"); done
  # shellcheck disable=SC2086  # DEPS: more inputs (a stack's generated header), blank-separated
  fresh "$out" ci/fuzz-smoke.sh "${deps[@]}" "${headers[@]}" ${DEPS:-} ||
    bg $CC $CFLAGS -fsanitize=fuzzer "$@" $LIBS -o "$out"
}
harness "$OUT/fuzz_pcap" runtime-c/fuzz/fuzz_pcap.c "${objs[@]}"
harnesses+=("pcap:pcap")
# the replies of a reject (rg_reject.c): any frame of any link type
harness "$OUT/fuzz_reject" runtime-c/fuzz/fuzz_reject.c "${objs[@]}"
harnesses+=("reject:reject")
# the control socket's request parser (no seeds of its own: a few requests of the protocol)
mkdir -p "$OUT/seeds/control"
printf 'list\n' >"$OUT/seeds/control/list"
printf 'attach\t/x/nf.so\tb\tk=v\tlog=/tmp/l\n' >"$OUT/seeds/control/attach"
printf 'rules\tload\t/x/r.so\n' >"$OUT/seeds/control/rules"
printf 'trace\t10\t5\n' >"$OUT/seeds/control/trace"
harness "$OUT/fuzz_control" runtime-c/fuzz/fuzz_control.c runtime-c/main/rg_ctlsec.c
harnesses+=("control:control")
# the framer (rg_framer.c): segmented deliveries against a one-piece reference (no seeds)
mkdir -p "$OUT/seeds/framer"
printf '\001\000\001\002\005\007\003\000\026\003\001\000\002hi\026\003\001\000\000' >"$OUT/seeds/framer/tls"
printf '\002\000\001\001\005\003\007\000GET / HTTP/1.1\r\nHost: a\r\n\r\n' >"$OUT/seeds/framer/lines"
harness "$OUT/fuzz_framer" runtime-c/fuzz/fuzz_framer.c "${objs[@]}"
harnesses+=("framer:framer")
# the domain name reader (rg_name_read: name_len() and the apps NF), checked against a second
# reader; seeds: [u16 offset][message] of a compressed response and of a pointer loop
mkdir -p "$OUT/seeds/name"
printf '\x0c\x00\x12\x34\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\x03www\x07example\x03com\x00\x00\x01\x00\x01\xc0\x10\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\x01\x02\x03\x04' >"$OUT/seeds/name/response"
printf '\x1d\x00\x12\x34\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\x01a\x00\x00\x01\x00\x01\x01b\xc0\x13' >"$OUT/seeds/name/loop"
harness "$OUT/fuzz_name" runtime-c/fuzz/fuzz_name.c "${objs[@]}"
harnesses+=("name:name")
for s in $STACKS; do
  gen="$OUT/gen/$s"
  # generate only (--cc true: the plain binary is not needed, the harness compiles the C)
  PYTHONPATH=$PWD $PY -m rubikgen build "specs/stacks/$s.yaml" -o "$gen" --cc true >/dev/null
  DEPS="$gen/${s}_gen.h" harness "$OUT/fuzz_$s" -DRG_FUZZ_DESC="${s}_desc" -I"$gen" \
    runtime-c/fuzz/fuzz_stack.c "$gen/${s}_gen.c" "$gen/${s}_handlers.c" "${objs[@]}"
  harnesses+=("$s:stack")
done
wait
[ ! -e "$OUT/failed" ] || { echo "fuzz-smoke: compiling a harness failed"; exit 1; }

# one fuzzer: its report in $OUT/fuzz_NAME.report, its exit status in $OUT/fuzz_NAME.rc
fuzz() {
  local name=$1 title=$2 replay=$3 rc=0
  shift 3
  mkdir -p "$OUT/corpus/$name"
  {
    echo "== fuzz_$title: ${SECS}s =="
    if "$@" 2>"$OUT/fuzz_$name.log"; then
      grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$OUT/fuzz_$name.log" | tr '\n' ' '
      echo
    else
      tail -40 "$OUT/fuzz_$name.log"
      echo "fuzz-smoke: fuzz_$name found a problem (log $OUT/fuzz_$name.log; replay: $replay)"
      rc=1
    fi
  } >"$OUT/fuzz_$name.report"
  echo "$rc" >"$OUT/fuzz_$name.rc"
}

FLAGS=(-max_total_time="$SECS" -rss_limit_mb="$RSS_MB" -print_final_stats=1)
names=()
for h in "${harnesses[@]}"; do
  name=${h%%:*} seeds=$OUT/seeds/${h##*:}
  rm -f "$OUT/fuzz_$name.rc"
  throttle
  fuzz "$name" "$name" "$OUT/fuzz_$name $OUT/$name-crash-*" "$OUT/fuzz_$name" "${FLAGS[@]}" \
    -artifact_prefix="$OUT/$name-crash-" -timeout=10 -max_len=8192 "$OUT/corpus/$name" "$seeds" &
  names+=("$name")
done
# the spec front-end (atheris): YAML in, diagnostics out
rm -f "$OUT/fuzz_specs.rc"
throttle
fuzz specs "specs (atheris)" "$PY ci/fuzz_specs.py $OUT/specs-crash-*" \
  env PYTHONPATH="$PWD" "$PY" ci/fuzz_specs.py "${FLAGS[@]}" -artifact_prefix="$OUT/specs-crash-" \
  -timeout=30 "$OUT/corpus/specs" specs/protocols specs/stacks &
names+=(specs)
wait

fail=0
for name in "${names[@]}"; do
  cat "$OUT/fuzz_$name.report" 2>/dev/null || true
  [ "$(cat "$OUT/fuzz_$name.rc" 2>/dev/null)" = 0 ] || fail=1
done
exit $fail
