#!/usr/bin/env bash
# Fuzz smoke: build the libFuzzer harnesses of runtime-c/fuzz (ASan + UBSan + LSan) and run each
# for a bounded time from seeds cut out of real captures; any finding fails.
#
#   bash ci/fuzz-smoke.sh              every harness for RG_FUZZ_SECONDS (default 30) seconds
#   RG_FUZZ_SECONDS=3600 RG_FUZZ_STACKS="tcp_ip sctp" bash ci/fuzz-smoke.sh    a long run
#
# Harnesses: fuzz_pcap (the capture reader), fuzz_reject (the replies of a reject), fuzz_control (the control socket's requests), fuzz_name (the domain name reader), ci/fuzz_specs.py (the spec front-end, atheris) and
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

# the runtime and the NFs, instrumented for coverage; rebuilt when a source or header changed
newest_header=$(ls -t runtime-c/include/rg/*.h handlers/nf/*.h | head -1)
objs=()
for src in runtime-c/src/*.c handlers/nf/*.c; do
  case "$src" in */rg_source_dpdk.c) continue ;; esac  # DPDK: its own archive, not fuzzed here
  o="$OUT/obj/$(basename "${src%.c}").o"
  if [ ! "$o" -nt "$src" ] || [ ! "$o" -nt "$newest_header" ]; then
    $CC $CFLAGS -fsanitize=fuzzer-no-link -c "$src" -o "$o"
  fi
  objs+=("$o")
done

$PY ci/fuzz_seeds.py "$OUT/seeds" >/dev/null
harnesses=()
$CC $CFLAGS -fsanitize=fuzzer runtime-c/fuzz/fuzz_pcap.c "${objs[@]}" $LIBS -o "$OUT/fuzz_pcap"
harnesses+=("pcap:pcap")
# the replies of a reject (rg_reject.c): any frame of any link type
$CC $CFLAGS -fsanitize=fuzzer runtime-c/fuzz/fuzz_reject.c "${objs[@]}" $LIBS -o "$OUT/fuzz_reject"
harnesses+=("reject:reject")
# the control socket's request parser (no seeds of its own: a few requests of the protocol)
mkdir -p "$OUT/seeds/control"
printf 'list\n' >"$OUT/seeds/control/list"
printf 'attach\t/x/nf.so\tb\tk=v\tlog=/tmp/l\n' >"$OUT/seeds/control/attach"
printf 'rules\tload\t/x/r.so\n' >"$OUT/seeds/control/rules"
printf 'trace\t10\t5\n' >"$OUT/seeds/control/trace"
$CC $CFLAGS -fsanitize=fuzzer runtime-c/fuzz/fuzz_control.c runtime-c/main/rg_ctlsec.c -o "$OUT/fuzz_control"
harnesses+=("control:control")
# the domain name reader (rg_name_read: name_len() and the apps NF), checked against a second
# reader; seeds: [u16 offset][message] of a compressed response and of a pointer loop
mkdir -p "$OUT/seeds/name"
printf '\x0c\x00\x12\x34\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\x03www\x07example\x03com\x00\x00\x01\x00\x01\xc0\x10\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\x01\x02\x03\x04' >"$OUT/seeds/name/response"
printf '\x1d\x00\x12\x34\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\x01a\x00\x00\x01\x00\x01\x01b\xc0\x13' >"$OUT/seeds/name/loop"
$CC $CFLAGS -fsanitize=fuzzer runtime-c/fuzz/fuzz_name.c "${objs[@]}" $LIBS -o "$OUT/fuzz_name"
harnesses+=("name:name")
for s in $STACKS; do
  gen="$OUT/gen/$s"
  # generate only (--cc true: the plain binary is not needed, the harness compiles the C)
  PYTHONPATH=$PWD $PY -m rubikgen build "specs/stacks/$s.yaml" -o "$gen" --cc true >/dev/null
  $CC $CFLAGS -fsanitize=fuzzer -DRG_FUZZ_DESC="${s}_desc" -I"$gen" runtime-c/fuzz/fuzz_stack.c \
    "$gen/${s}_gen.c" "$gen/${s}_handlers.c" "${objs[@]}" $LIBS -o "$OUT/fuzz_$s"
  harnesses+=("$s:stack")
done

fail=0
for h in "${harnesses[@]}"; do
  name=${h%%:*} seeds=$OUT/seeds/${h##*:}
  mkdir -p "$OUT/corpus/$name"
  echo "== fuzz_$name: ${SECS}s =="
  if ! "$OUT/fuzz_$name" -max_total_time="$SECS" -rss_limit_mb="$RSS_MB" -timeout=10 \
    -max_len=8192 -print_final_stats=1 -artifact_prefix="$OUT/$name-crash-" \
    "$OUT/corpus/$name" "$seeds" 2>"$OUT/fuzz_$name.log"; then
    tail -40 "$OUT/fuzz_$name.log"
    echo "fuzz-smoke: fuzz_$name found a problem (log $OUT/fuzz_$name.log; replay: $OUT/fuzz_$name $OUT/$name-crash-*)"
    fail=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$OUT/fuzz_$name.log" | tr '\n' ' '
    echo
  fi
done

# the spec front-end (atheris): YAML in, diagnostics out
mkdir -p "$OUT/corpus/specs"
echo "== fuzz_specs (atheris): ${SECS}s =="
if ! PYTHONPATH=$PWD $PY ci/fuzz_specs.py -max_total_time="$SECS" -rss_limit_mb="$RSS_MB" -timeout=30 \
  -print_final_stats=1 -artifact_prefix="$OUT/specs-crash-" "$OUT/corpus/specs" specs/protocols \
  specs/stacks 2>"$OUT/fuzz_specs.log"; then
  tail -40 "$OUT/fuzz_specs.log"
  echo "fuzz-smoke: fuzz_specs found a problem (log $OUT/fuzz_specs.log; replay: $PY ci/fuzz_specs.py $OUT/specs-crash-*)"
  fail=1
else
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$OUT/fuzz_specs.log" | tr '\n' ' '
  echo
fi
exit $fail
