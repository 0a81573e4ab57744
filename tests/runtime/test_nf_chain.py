"""NF chains (runtime-c/main/rg_nfchain.c, rg_nf_api.h): real NFs built as shared objects with
the real compiler, run by the tcp_ip stack on real captures.

- order: three recorders (tests/nf/recorder_nf.c) in a chain file each log every event they
  get; the log must be, packet after packet, the first NF's events, then the second's, then the
  third's, the same events each time. Each recorder's reassembled TCP bytes are compared with
  tshark's `follow` (a reference nobody here wrote);
- a drop verdict of the second NF stops the third for that packet and nothing else, and
  `--write` writes every frame but the dropped ones (compared byte for byte with the capture);
- a .so without the descriptor, one of another ABI version, and one subscribing to an event the
  stack lacks are refused with a message naming the file and the problem;
- the sample out-of-tree NF (examples/nf/flowbytes_nf.c) counts what flowstats counts;
- chain files are validated with positions (rubikgen validate) and by the binary.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from support.captures import REPO, SANITIZER_REPORT, STACK
from support.nf_chain import (
    _cc,
    _chain,
    _run,
)
from support.oracle import TRACES, reference_streams, tshark_available

CAPTURE = TRACES / "mixed-android-mobile.pcap"


@pytest.fixture(scope="module")
def sos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("nf-so")
    nosym = d / "nosym.c"
    nosym.write_text("int not_an_nf(void) { return 0; }\n")
    # a descriptor of ABI version 99: the driver must refuse it before calling anything
    future = d / "future.c"
    future.write_text(
        '#include "rg/rg_nf_api.h"\n'
        'RG_NF_EXPORT = {99, sizeof(rg_nf_abi), "future", "", 0, 0, 0, 0, 0, 0};\n'
    )
    # subscribes to tcp.http_request, which tcp_ip does not raise
    missing = d / "missing.c"
    missing.write_text(
        '#include "rg/rg_nf_api.h"\n'
        "static int f(void *n, const rg_nf_ev *e, void *s) { (void)n; (void)e; (void)s; "
        "return RG_PASS; }\n"
        'static const rg_nf_sub subs[] = {{"tcp", "http_request", f, 0}};\n'
        "static void *i(const rg_stack_desc *s, const rg_nf_kv *c, unsigned n, "
        "const rg_nf_host *h, char *e, size_t l) { (void)s; (void)c; (void)n; (void)h; "
        "(void)e; (void)l; return (void *)subs; }\n"
        "static int fi(void *n, char *e, size_t l) { (void)n; (void)e; (void)l; return 0; }\n"
        'RG_NF_EXPORT = {RG_NF_ABI_VERSION, sizeof(rg_nf_abi), "missing", "", subs, 1, 0, i, '
        "fi, 0};\n"
    )
    return {
        "recorder": _cc(REPO / "tests" / "nf" / "recorder_nf.c", d / "recorder.so"),
        "flowbytes": _cc(REPO / "examples" / "nf" / "flowbytes_nf.c", d / "flowbytes.so"),
        "nosym": _cc(nosym, d / "nosym.so"),
        "future": _cc(future, d / "future.so"),
        "missing": _cc(missing, d / "missing.so"),
    }


def _frames(pcap: Path) -> list[bytes]:
    """The frames of a pcap file (micro- or nanosecond), without their record headers."""
    data = pcap.read_bytes()
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    out, off = [], 24
    while off + 16 <= len(data):
        caplen = struct.unpack(endian + "I", data[off + 8 : off + 12])[0]
        out.append(data[off + 16 : off + 16 + caplen])
        off += 16 + caplen
    assert off == len(data), pcap
    return out


def _recorders(tmp: Path, so: Path, log: Path, drop: dict[str, str] | None = None) -> Path:
    items = []
    for tag in "abc":
        params = {"tag": tag, "log": str(log)}
        if drop and tag in drop:
            params["drop"] = drop[tag]
        items.append({"nf": str(so), "name": tag, "params": params})
    return _chain(tmp / "chain.yaml", items)


def _runs(log: Path) -> list[tuple[str, list[str]]]:
    """The log as runs of consecutive lines of one recorder: (tag, lines without the tag)."""
    runs: list[tuple[str, list[str]]] = []
    for line in log.read_text().splitlines():
        tag, _, rest = line.partition(" ")
        if rest == "fini":
            continue
        if runs and runs[-1][0] == tag:
            runs[-1][1].append(rest)
        else:
            runs.append((tag, [rest]))
    return runs


def _tcp_bytes(lines: list[str]) -> dict[tuple[int, int], bytes]:
    """Each (uid, dir)'s tcp_data bytes, concatenated in call order."""
    out: dict[tuple[int, int], bytearray] = defaultdict(bytearray)
    for rest in lines:
        kind, _pkt, handler, uid, d, _seq, hexdata = rest.split(" ")
        if kind == "call" and handler == "tcp_data" and hexdata != "-":
            out[(int(uid), int(d))] += bytes.fromhex(hexdata)
    return {k: bytes(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def chain_log(binary: Path, sos: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    tmp = tmp_path_factory.mktemp("chain")
    log = tmp / "log.txt"
    _run(binary, CAPTURE, "--chain", _recorders(tmp, sos["recorder"], log), "--out", tmp)
    return log


def test_chain_calls_nfs_in_chain_order(chain_log: Path) -> None:
    runs = _runs(chain_log)
    assert len(runs) > 100 and len(runs) % 3 == 0, len(runs)
    for i in range(0, len(runs), 3):
        (ta, a), (tb, b), (tc, c) = runs[i : i + 3]
        assert (ta, tb, tc) == ("a", "b", "c"), (i, ta, tb, tc)
        assert a == b == c, (i, a[:3], b[:3], c[:3])
    lines = chain_log.read_text().splitlines()
    assert lines[-3:] == ["a fini", "b fini", "c fini"]  # detached in chain order at the end


def test_chain_nfs_get_the_bytes_tshark_follows(chain_log: Path) -> None:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    ours = {
        tag: {hashlib.sha256(v).hexdigest() for v in _tcp_bytes(lines).values()}
        for tag, lines in (
            (t, [x for r in _runs(chain_log) if r[0] == t for x in r[1]]) for t in "abc"
        )
    }
    ref = {
        hashlib.sha256(d.data).hexdigest()
        for s in reference_streams(CAPTURE)
        if s.proto == "tcp" and {"syn", "synack"} <= s.flags
        for d in s.directions
        if d.data and not d.gaps
    }
    assert len(ref) >= 5, ref
    for tag in "abc":
        assert ref <= ours[tag], (tag, sorted(ref - ours[tag])[:3])


def test_drop_verdict_stops_later_nfs(binary: Path, sos: dict[str, Path], tmp_path: Path) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    # the packets of the first data calls: b drops them
    first = tmp_path / "first.txt"
    chain = _chain(
        tmp_path / "one.yaml", [{"nf": str(sos["recorder"]), "params": {"log": str(first)}}]
    )
    _run(binary, CAPTURE, "--chain", chain, "--out", tmp_path)
    pkts = sorted({int(x.split(" ")[2]) for x in first.read_text().splitlines()[:-1]} - {0})
    drop = pkts[3:9:2]
    log, written = tmp_path / "log.txt", tmp_path / "written.pcap"
    p = _run(
        binary,
        CAPTURE,
        "--chain",
        _recorders(tmp_path, sos["recorder"], log, {"b": ",".join(map(str, drop))}),
        "--out",
        tmp_path,
        "--write",
        written,
        "--summary",
        "json",
    )
    assert json.loads(p.stdout.strip().splitlines()[-1])["skipped"] == 0  # pkt_no = frame number
    # --write: every frame but the dropped ones, byte for byte, in order
    frames = _frames(CAPTURE)
    assert _frames(written) == [f for i, f in enumerate(frames, 1) if i not in drop]
    by: dict[str, list[str]] = defaultdict(list)
    for tag, lines in _runs(log):
        by[tag] += lines
    calls = {t: [x for x in by[t] if x.startswith("call ")] for t in "abc"}

    def at(t: str, p: int) -> list[str]:
        return [x for x in calls[t] if int(x.split(" ")[1]) == p]

    for p in drop:
        assert at("a", p) and at("a", p) == at("b", p), p  # b dropped but saw its events
        assert not at("c", p), p  # c never saw the dropped packets
    kept = [x for x in calls["a"] if int(x.split(" ")[1]) not in drop]
    # c saw every other call; its per-flow sequence numbers skip the dropped ones
    strip = [" ".join(x.split(" ")[:5] + x.split(" ")[6:]) for x in kept]
    assert [" ".join(x.split(" ")[:5] + x.split(" ")[6:]) for x in calls["c"]] == strip


@pytest.mark.parametrize(
    ("which", "message"),
    [
        ("nosym", "no symbol 'rg_nf_v1'"),
        ("future", "NF ABI version 99, this driver speaks version 1"),
        ("missing", "no event 'http_request' on layer 'tcp' (handlers there: tcp_data, tcp6_data)"),
    ],
)
def test_bad_shared_objects_are_refused(
    which: str, message: str, binary: Path, sos: dict[str, Path], tmp_path: Path
) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    so = sos[which]
    p = _run(binary, CAPTURE, "--nf", so, "--out", tmp_path, ok=False)
    assert p.returncode == 1, p
    assert message in p.stderr and str(so) in p.stderr, p.stderr
    assert not p.stdout  # nothing ran
    # in a chain file: the position of the item
    chain = _chain(tmp_path / "c.yaml", [{"nf": "flowstats"}, {"nf": str(so)}])
    p = _run(binary, CAPTURE, "--chain", chain, "--out", tmp_path, ok=False)
    assert p.returncode == 1 and p.stderr.startswith(f"{chain}:3:7: error: "), p.stderr
    assert message in p.stderr, p.stderr


def test_sample_nf_counts_what_flowstats_counts(
    binary: Path, sos: dict[str, Path], tmp_path: Path
) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    _run(binary, CAPTURE, "--nf", sos["flowbytes"], "--out", tmp_path)
    _run(binary, CAPTURE, "--nf", "flowstats", "--flowstats-all", "--out", tmp_path)
    ours = [json.loads(x) for x in (tmp_path / "flowbytes.jsonl").read_text().splitlines()]
    ref = [json.loads(x) for x in (tmp_path / "flowstats.jsonl").read_text().splitlines()]
    assert len(ours) > 50
    got = {r["uid"]: (r["layer"], r["packets"], r["bytes"]) for r in ours}
    want = {r["uid"]: (r["layer"], r["packets"], r["bytes"]) for r in ref}
    assert got == want


def test_stock_nf_through_the_chain_keeps_its_flag(binary: Path, tmp_path: Path) -> None:
    """--nf flowstats runs as a one-NF chain: its flag reaches it as the parameter all."""
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    chain = _chain(tmp_path / "c.yaml", [{"nf": "flowstats", "params": {"all": True}}])
    _run(binary, CAPTURE, "--chain", chain, "--out", tmp_path / "a")
    _run(binary, CAPTURE, "--nf", "flowstats", "--flowstats-all", "--out", tmp_path / "b")
    _run(binary, CAPTURE, "--nf", "flowstats", "--out", tmp_path / "c")
    a, b, c = ((tmp_path / d / "flowstats.jsonl").read_text() for d in "abc")
    assert a == b and len(c) < len(b)


def test_validate_reports_chain_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "chain.yaml"
    bad.write_text(
        "chain:\n"
        "  - nf: flowstats\n"
        "  - nf: ./absent.so\n"
        "  - nf: flowstat\n"
        "  - nf: events\n"
        "    name: flowstats\n"
    )
    good = tmp_path / "good.yaml"
    good.write_text("chain:\n  - nf: events\n    params: {out: x}\n")
    cmd = [sys.executable, "-m", "rubikgen", "validate"]
    p = subprocess.run([*cmd, str(bad)], capture_output=True, text=True, check=False)
    assert p.returncode == 1
    out = p.stdout + p.stderr
    assert f"{bad}:3:9: error[RG007]: no such NF shared object" in out, out
    assert f"{bad}:4:9: error[RG011]: unknown NF 'flowstat'" in out, out
    assert f"{bad}:6:11: error[RG022]: two NFs of the chain are called 'flowstats'" in out, out
    p = subprocess.run([*cmd, str(good)], capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    (tmp_path / "shape.yaml").write_text("chain:\n  - nf: events\n    param: {}\n")
    p = subprocess.run(
        [*cmd, str(tmp_path / "shape.yaml")], capture_output=True, text=True, check=False
    )
    assert p.returncode == 1 and "shape.yaml:3:5: error[RG005]: unknown key 'param'" in p.stdout


def test_binary_reports_chain_file_errors(binary: Path, tmp_path: Path) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    cases = {
        "chain:\n  - nf: events\n    param: {}\n": ":3:5: error: unknown key in a chain item",
        "chain:\n  - nf: nope\n": ":2:9: error: unknown NF 'nope'",
        "chain: [{nf: events}, {nf: events}]\n": (
            ":1:28: error: events: the chain has an NF called 'events' already"
        ),
        "nfs: []\n": ":1:1: error: unknown top-level key",
    }
    for i, (text, want) in enumerate(cases.items()):
        f = tmp_path / f"c{i}.yaml"
        f.write_text(text)
        p = _run(binary, CAPTURE, "--chain", f, "--out", tmp_path, ok=False)
        assert p.returncode == 1 and f"{f}{want}" in p.stderr, (text, p.stderr)


# ---------------------------------------------------------------------------------------------
# dynamic subscription (rg_nf_host.subscribe, no_more_bytes)
# ---------------------------------------------------------------------------------------------


def _seq_stats(stderr: str, layer: str) -> dict[str, int]:
    """The `--stats` lines of one layer: {"seq.bytes_new": N, ...}."""
    out = {}
    for line in stderr.splitlines():
        f = line.split()
        if len(f) == 3 and f[0] == layer and f[2].isdigit():
            out[f[1]] = int(f[2])
    return out


def _untagged(log: Path) -> list[str]:
    return [x.split(" ", 1)[1] for x in log.read_text().splitlines() if not x.endswith(" fini")]


def _run_chain(
    binary: Path, so: Path, tmp: Path, name: str, items: list[dict[str, int]]
) -> tuple[dict[str, int], dict[str, Any], list[list[str]]]:
    """Recorders r0, r1... with these parameters: (tcp seq stats, summary, their logs)."""
    logs = [tmp / f"{name}{i}.txt" for i in range(len(items))]
    chain = _chain(
        tmp / f"{name}.yaml",
        [
            {"nf": str(so), "name": f"r{i}", "params": {"tag": f"r{i}", "log": str(logs[i]), **p}}
            for i, p in enumerate(items)
        ],
    )
    p = _run(binary, CAPTURE, "--chain", chain, "--out", tmp, "--stats", "--summary", "json")
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    return _seq_stats(p.stderr, "tcp"), summary, [_untagged(x) for x in logs]


def _flow_calls(lines: list[str]) -> dict[int, list[tuple[int, str]]]:
    """Each flow's tcp_data calls in order: (dir, hex)."""
    out: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for x in lines:
        kind, _pkt, handler, uid, d, _seq, hexdata = x.split(" ")
        if kind == "call" and handler == "tcp_data":
            out[int(uid)].append((int(d), hexdata))
    return out


@pytest.fixture(scope="module")
def full_run(
    binary: Path, sos: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, int], dict[str, Any], list[list[str]]]:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    return _run_chain(binary, sos["recorder"], tmp_path_factory.mktemp("full"), "full", [{}])


def _no_memory(layers: dict[str, Any]) -> dict[str, Any]:
    """The summary's layers without their memory counters."""
    return {n: {k: v for k, v in lay.items() if k != "memory"} for n, lay in layers.items()}


def test_no_more_bytes_stops_reassembly(
    binary: Path, sos: dict[str, Path], tmp_path: Path, full_run: Any
) -> None:
    st_full, sum_full, (log_full,) = full_run
    st, summ, (log,) = _run_chain(
        binary, sos["recorder"], tmp_path, "nb", [{"nobytes_after": 1024}]
    )
    full, got = _tcp_bytes(log_full), _tcp_bytes(log)
    assert full.keys() == got.keys()
    cut = 0
    for k, data in full.items():
        # the first KB (at least) of each direction, then nothing: a prefix of its bytes
        assert data.startswith(got[k]) and len(got[k]) >= min(1024, len(data)), k
        cut += len(got[k]) < len(data)
    assert cut >= 5, cut
    # the stack stopped buffering what nobody wants: fewer bytes inserted and delivered, fewer
    # data calls (the driver's counters see every handler call)
    assert st["seq.bytes_new"] < st_full["seq.bytes_new"] // 2, (st, st_full)
    undelivered = sum(len(v) for v in full.values()) - sum(len(v) for v in got.values())
    assert st["seq.bytes_delivered"] == st_full["seq.bytes_delivered"] - undelivered
    assert summ["calls"] < sum_full["calls"] and summ["payload_bytes"] < sum_full["payload_bytes"]
    # instances live and end as before
    # the same instances and closes (the reassembly memory held differs: what it stopped buffering)
    assert _no_memory(summ["layers"]) == _no_memory(sum_full["layers"])
    assert summ["flows"] == sum_full["flows"]

    # a second NF that wants every byte: the stack reassembles everything, the first NF gets
    # what it got alone
    st2, summ2, (log0, log1) = _run_chain(
        binary, sos["recorder"], tmp_path, "shared", [{"nobytes_after": 1024}, {}]
    )
    assert st2["seq.bytes_new"] == st_full["seq.bytes_new"]
    assert summ2["payload_bytes"] == sum_full["payload_bytes"]
    assert _tcp_bytes(log0) == got and _tcp_bytes(log1) == full


def test_unsubscribe_stops_one_nfs_events_for_one_flow(
    binary: Path, sos: dict[str, Path], tmp_path: Path, full_run: Any
) -> None:
    st_full, sum_full, (log_full,) = full_run
    st, summ, (log0, log1) = _run_chain(
        binary, sos["recorder"], tmp_path, "unsub", [{"unsub_after": 1024}, {}]
    )
    full, got = _flow_calls(log_full), _flow_calls(log0)
    cut = 0
    for uid, calls in full.items():
        mine = got.get(uid, [])
        assert calls[: len(mine)] == mine, uid  # a prefix of the flow's calls
        total = sum(len(h) // 2 for _, h in mine)
        assert total >= min(1024, sum(len(h) // 2 for _, h in calls)), uid
        if len(mine) < len(calls):
            # it stopped right after the call that took it past 1 KB
            assert total - len(mine[-1][1]) // 2 < 1024 <= total, uid
            cut += 1
    assert cut >= 5, cut
    assert _flow_calls(log1) == full  # the other NF's subscription is untouched
    assert st == st_full and summ["payload_bytes"] == sum_full["payload_bytes"]


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_example_chain_writes_what_each_nf_writes_alone(binary: Path, tmp_path: Path) -> None:
    """examples/chain.yaml through `rubikgen run`: three stock NFs in one run write exactly
    what each writes alone (each is compared with tshark by the e2e suites)."""
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "rubikgen", "run", "specs/stacks/tcp_ip.yaml", str(CAPTURE)]
    chain = REPO / "examples" / "chain.yaml"
    p = subprocess.run([*cmd, "--chain", str(chain), "--out", str(tmp_path / "chain"),
                        "--", "--seed", "1"], cwd=REPO, env=env, capture_output=True,
                       text=True, check=False)  # fmt: skip
    assert p.returncode == 0, p.stderr
    alone: dict[str, bytes] = {}
    for nf, extra in (("flowstats", ["--flowstats-all"]), ("events", []), ("streams", [])):
        _run(binary, CAPTURE, "--nf", nf, "--out", tmp_path / nf, "--seed", "1", *extra)
        alone |= _tree(tmp_path / nf)
    assert set(alone) >= {"flowstats.jsonl", "events.jsonl", "flows.jsonl", "streams.json"}
    assert _tree(tmp_path / "chain") == alone
    # a bad chain file: its errors with positions, nothing built or run
    bad = tmp_path / "bad.yaml"
    bad.write_text("chain:\n  - nf: flowstat\n")
    p = subprocess.run([*cmd, "--chain", str(bad)], cwd=REPO, env=env, capture_output=True,
                       text=True, check=False)  # fmt: skip
    assert p.returncode == 1 and f"{bad}:2:9: error[RG011]: unknown NF 'flowstat'" in p.stderr


def test_chain_schema_accepts_the_example_and_rejects_bad_shapes() -> None:
    import jsonschema  # type: ignore[import-untyped]
    import yaml

    schema = json.loads((REPO / "schema" / "chain.schema.json").read_text())
    jsonschema.validate(yaml.safe_load((REPO / "examples" / "chain.yaml").read_text()), schema)
    for bad in ({"chain": []}, {"chain": [{"name": "x"}]}, {"chain": [{"nf": "a", "x": 1}]},
                {"chain": [{"nf": "a", "params": {"k": [1]}}]}, {"nfs": []}):  # fmt: skip
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_stock_names_match_the_binarys_registry(binary: Path) -> None:
    """rubikgen/front/chain.py's STOCK_NFS (what `rubikgen validate` accepts in `nf:`) is the NF
    registry of the binaries (handlers/nf, rg_nf_table), as `--help` lists it."""
    from rubikgen.front.chain import STOCK_NFS

    text = _run(binary, "--help").stdout
    block = text.split("--nf NAME", 1)[1].split("\n  --", 1)[0]
    names = [ln.split()[0] for ln in block.splitlines()[1:] if ln.strip()]
    assert tuple(n for n in names if n not in ("count", "none")) == STOCK_NFS


def test_chain_runtime_is_asan_clean(sos: dict[str, Path], tmp_path: Path) -> None:
    """The chain machinery (collection, dispatch, verdicts, per-flow state, unsubscription,
    no_more_bytes, --write) under ASan and UBSan, leaks included, on captures with gaps,
    fragments and retransmissions."""
    from rubikgen.toolchain.build import build

    asan = build(STACK, REPO / "build" / "tcp_ip", sanitize=True, quiet=True).binary
    log = tmp_path / "log.txt"
    params = [
        {"tag": "a", "log": str(log), "nobytes_after": 1024},
        {"tag": "b", "log": str(log), "drop": "5,9,40", "unsub_after": 2000},
        {"tag": "c", "log": str(log), "nobytes_after": 100},
    ]
    chain = _chain(
        tmp_path / "c.yaml",
        [{"nf": str(sos["recorder"]), "name": p["tag"], "params": p} for p in params]
        + [{"nf": str(sos["flowbytes"])}, {"nf": "streams"}],
    )
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0")
    names = [
        "http-ooo-lost-rst-tlpw1.pcap",
        "ipv4-frag-socks5-http.pcap",
        "tcp-retransmissions.pcap",
        "4in6-tcp-tls.pcap",  # one flow: with workers, the others write empty files
    ]
    for name in names:
        if not (TRACES / name).is_file():
            continue
        # one context, and 3 workers: a chain each, the outputs merged, --write from the reader
        for workers in ([], ["--workers", "3"]):
            argv = [str(asan), str(TRACES / name), "--chain", str(chain), "--out", str(tmp_path),
                    "--write", str(tmp_path / "w.pcap"), *workers]  # fmt: skip
            p = subprocess.run(
                argv, capture_output=True, text=True, env=env, timeout=300, check=False
            )
            assert p.returncode == 0, (name, workers, p.stderr[-3000:])
            assert not any(r in p.stderr for r in SANITIZER_REPORT), p.stderr[-3000:]
