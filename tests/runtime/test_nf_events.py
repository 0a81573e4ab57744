"""Events between NFs (rg_nf_api.h minor 3, docs/nf.md "Events between NFs"): the sample
detector (examples/nf/detect_nf.c) raises the chain file's event `flagged` on the packet whose
delivered bytes complete a pattern, the sample blocker (examples/nf/block_nf.c), after it in the
chain, drops the flow on it.

- offline, `--write` on a real capture: the output is the capture without exactly the frames of
  the flagged flows from the flagging frame on, byte for byte. The reference is tshark's
  dissection (frames, streams, sequence numbers and payloads), put in sequence order per
  direction the way a receiver would, with the pattern searched in what each frame completes;
- an NF built against the previous ABI minor (RG_NF_ABI_TARGET_MINOR=2: minor 2's structures)
  in the same chain gets the same events as the same NF built against minor 3, and neither gets
  the NF events it did not subscribe to;
- injection (rg_nf_host.inject): the blocker with `inject: both` adds, right after the place
  of each flagging frame (dropped), the RSTs to both sides (only the sender's for a segment
  without ACK; an ICMP port unreachable over UDP), judged by tshark: checksums good, the
  sender's RST at exactly its RCV.NXT and the receiver's at the dropped segment's SEG.SEQ
  (RFC 5961 3.2), addresses, ports and link addresses of the right side;
  the same with `--workers 2`;
- raise refuses a payload of other kinds than declared and an event the NF's item does not
  list under `raises`;
- the chain file's declarations are checked by the binary with positions (what `rubikgen
  validate` says of them is in the error corpus, tests/specs/errors/RG0*_nf_event_*.yaml).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from support.captures import REPO
from support.nf_chain import _cc, _run
from support.oracle import TRACES, tshark_available
from support.oracle.tshark import _tshark
from support.pcap_frames import frames
from support.reject import Rule, check_icmp, check_rst, expected_replies, protos
from support.reject import frames as dissect

CAPTURE = TRACES / "mixed-android-mobile.pcap"
PATTERN = "google"
EVENTS = {"flagged": {"reason": "bytes", "dir": "num", "offset": "num"}}


@pytest.fixture(scope="module")
def sos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("nfev-so")
    ex = REPO / "examples" / "nf"
    rec = REPO / "tests" / "nf" / "recorder_nf.c"
    return {
        "detect": _cc(ex / "detect_nf.c", d / "detect.so"),
        "block": _cc(ex / "block_nf.c", d / "block.so"),
        "recorder": _cc(rec, d / "recorder.so"),
        "recorder2": _cc(rec, d / "recorder2.so", "-DRG_NF_ABI_TARGET_MINOR=2"),
    }


def _chainfile(path: Path, items: list[dict[str, object]]) -> Path:
    path.write_text(yaml.safe_dump({"events": EVENTS, "chain": items}, sort_keys=False))
    return path


def _detect_block(sos: dict[str, Path], *extra: dict[str, object]) -> list[dict[str, object]]:
    return [
        *extra,
        {"nf": str(sos["detect"]), "raises": ["flagged"], "params": {"pattern": PATTERN}},
        {"nf": str(sos["block"]), "subscribes": {"flagged": {"reason": "bytes"}}},
    ]


def _flagging_frames(pcap: Path, pattern: bytes) -> dict[tuple[str, int], int]:
    """(tcp|udp, tshark's stream) -> the frame whose payload completes the first occurrence of
    pattern in one direction's bytes: TCP segments in sequence order from the SYN (or the
    first segment), each byte once, a segment delivered when the bytes before it are; UDP
    datagrams in frame order."""
    fields = ["frame.number", "tcp.stream", "udp.stream", "ip.src", "ipv6.src", "tcp.srcport",
              "udp.srcport", "tcp.seq_raw", "tcp.flags.syn", "tcp.payload", "udp.payload",
              "icmp.type", "icmpv6.type"]  # fmt: skip
    args = ["-r", str(pcap), "-T", "fields", "-E", "occurrence=f"]
    out: dict[tuple[str, int], int] = {}
    nxt: dict[tuple[str, int, str], int] = {}
    pending: dict[tuple[str, int, str], dict[int, bytes]] = defaultdict(dict)
    got: dict[tuple[str, int, str], bytes] = defaultdict(bytes)
    for line in _tshark([*args, *[x for f in fields for x in ("-e", f)]]).splitlines():
        v = dict(zip(fields, line.split("\t"), strict=True))
        if v["icmp.type"] or v["icmpv6.type"]:
            continue  # an ICMP error quoting a datagram: no payload of the flow
        src = f"{v['ip.src'] or v['ipv6.src']}"
        if v["tcp.stream"]:
            flow = ("tcp", int(v["tcp.stream"]))
            key = (*flow, f"{src}:{v['tcp.srcport']}")
            seq = int(v["tcp.seq_raw"])
            if v["tcp.flags.syn"] == "1":
                nxt.setdefault(key, (seq + 1) & 0xFFFFFFFF)
                continue
            data = bytes.fromhex(v["tcp.payload"].replace(":", ""))
            if not data:
                continue
            nxt.setdefault(key, seq)
            pending[key][seq] = data
            new = b""
            progress = True
            while progress:  # every pending segment that reaches the next byte
                progress = False
                for s, d in list(pending[key].items()):
                    off = (nxt[key] - s) & 0xFFFFFFFF
                    if off >= 1 << 31:
                        continue  # after a hole
                    del pending[key][s]
                    if off < len(d):
                        new += d[off:]
                        nxt[key] = (nxt[key] + len(d) - off) & 0xFFFFFFFF
                        progress = True
        elif v["udp.stream"]:
            flow = ("udp", int(v["udp.stream"]))
            key = (*flow, f"{src}:{v['udp.srcport']}")
            new = bytes.fromhex(v["udp.payload"].replace(":", ""))
        else:
            continue
        if not new or flow in out:
            continue
        if pattern in got[key][-(len(pattern) - 1) :] + new:
            out[flow] = int(v["frame.number"])
        got[key] += new
    return out


def _frame_flows(pcap: Path) -> list[tuple[str, int] | None]:
    fields = ["tcp.stream", "udp.stream", "icmp.type", "icmpv6.type"]
    args = ["-r", str(pcap), "-T", "fields", "-E", "occurrence=f"]
    out: list[tuple[str, int] | None] = []
    for line in _tshark([*args, *[x for f in fields for x in ("-e", f)]]).splitlines():
        t, u, i4, i6 = line.split("\t")
        out.append(None if i4 or i6 else ("tcp", int(t)) if t else ("udp", int(u)) if u else None)
    return out


def _blocked_run(
    binary: Path, sos: dict[str, Path], tmp: Path, block_params: dict[str, str]
) -> tuple[Path, Path, dict[tuple[str, int], int], list[tuple[str, int] | None]]:
    """The detector and the blocker (with block_params) over CAPTURE with --write: the chain
    file, the file written, tshark's flagging frame of each flagged flow, each frame's flow."""
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    items = _detect_block(sos)
    items[1]["params"] = block_params
    chain = _chainfile(tmp / "chain.yaml", items)
    written = tmp / "written.pcap"
    _run(binary, CAPTURE, "--chain", chain, "--out", tmp, "--write", written)
    return chain, written, _flagging_frames(CAPTURE, PATTERN.encode()), _frame_flows(CAPTURE)


def test_blocker_drops_exactly_the_flagged_flows(
    binary: Path, sos: dict[str, Path], tmp_path: Path
) -> None:
    _chain, written, flag, flows = _blocked_run(binary, sos, tmp_path, {})
    every = {f for f in flows if f}
    assert len(flag) >= 5 and len(every - set(flag)) >= 5, (len(flag), len(every))
    keep = [
        data
        for n, ((_ts, data), fl) in enumerate(zip(frames(CAPTURE), flows, strict=True), 1)
        if fl not in flag or n < flag[fl]
    ]
    got = [d for _ts, d in frames(written)]
    assert len(got) == len(keep) and got == keep
    # the blocker's own record: one line per flow, on the flagging frame, raised by position 0
    blocked = [json.loads(x) for x in (tmp_path / "blocked.jsonl").read_text().splitlines()]
    assert sorted(b["pkt"] for b in blocked) == sorted(flag.values())
    assert {(b["reason"], b["raiser"]) for b in blocked} == {(PATTERN, 0)}


def test_blocker_injects_resets_where_it_drops(
    binary: Path, sos: dict[str, Path], tmp_path: Path
) -> None:
    chain, written, flag, flows = _blocked_run(binary, sos, tmp_path, {"inject": "both"})
    at = set(flag.values())
    fin, fout = dissect(CAPTURE), dissect(written)
    bin_, bout = [d for _ts, d in frames(CAPTURE)], [d for _ts, d in frames(written)]
    both = Rule("inject", lambda f: True, both=True)
    j = nrst = 0
    for n, (f, fl) in enumerate(zip(fin, flows, strict=True), 1):
        if fl in flag and n > flag[fl]:
            continue  # dropped with its flow
        if n not in at:
            assert bout[j] == bin_[n - 1], f"input frame {n}: not passed as is"
            j += 1
            continue
        for k in range(expected_replies(f, both)):
            if "tcp" in protos(f):
                check_rst(f, fout[j], to_receiver=k == 1)
                nrst += 1
            else:
                check_icmp(f, bin_[n - 1], fout[j], bout[j], admin=False)
            j += 1
    assert j == len(bout), f"{len(bout) - j} output frames more than expected"
    assert nrst >= 10, nrst
    # --workers 2: each worker's detector and blocker see their flows; the reading thread
    # writes the frames and the injected ones in input order: the same file
    two = tmp_path / "two.pcap"
    _run(binary, CAPTURE, "--chain", chain, "--out", tmp_path / "w", "--write", two,
         "--workers", "2")  # fmt: skip
    assert [d for _ts, d in frames(two)] == bout


def test_nf_of_the_previous_minor_keeps_working(
    binary: Path, sos: dict[str, Path], tmp_path: Path
) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    logs = {t: tmp_path / f"{t}.log" for t in ("old", "new")}
    recs = [
        {"nf": str(sos[so]), "name": t, "params": {"tag": "r", "log": str(logs[t])}}
        for so, t in (("recorder2", "old"), ("recorder", "new"))
    ]
    # the recorders after the detector, before the blocker: the flagged flows still reach them
    items = _detect_block(sos)
    chain = _chainfile(tmp_path / "chain.yaml", [items[0], *recs, items[1]])
    _run(binary, CAPTURE, "--chain", chain, "--out", tmp_path)
    old, new = (logs[t].read_text() for t in ("old", "new"))
    assert old == new and old.count("\n") > 1000
    # both see the packets of the flows blocked (before the blocker drops them), not the event
    assert " nf " not in old
    blocked = [json.loads(x) for x in (tmp_path / "blocked.jsonl").read_text().splitlines()]
    pkts = {int(x.split(" ")[2]) for x in old.splitlines() if x.startswith("r call ")}
    assert blocked and {b["pkt"] for b in blocked} <= pkts


BAD = {
    # subscribes to an event no one declares
    "events: {flagged: {reason: bytes}}\n"
    "chain:\n"
    "  - {nf: DETECT, raises: [flagged], params: {pattern: x}}\n"
    "  - nf: BLOCK\n"
    "    subscribes: [flaged]\n": ":5:18: error: `subscribes`: the chain file declares no event "
    "'flaged'",
    # a field of the wrong type
    "events: {flagged: {reason: bytes}}\n"
    "chain:\n"
    "  - {nf: DETECT, raises: [flagged], params: {pattern: x}}\n"
    "  - nf: BLOCK\n"
    "    subscribes: {flagged: {reason: num}}\n": ":5:36: error: event 'flagged' has no field "
    "'reason' of type num",
    # the blocker before the detector
    "events: {flagged: {reason: bytes}}\n"
    "chain:\n"
    "  - nf: BLOCK\n"
    "    subscribes: [flagged]\n"
    "  - {nf: DETECT, raises: [flagged], params: {pattern: x}}\n": ":4:18: error: 'flagged' is raised by no NF before this one",
    # the blocker subscribes in its code, its chain item does not say so
    "events: {flagged: {reason: bytes}}\n"
    "chain:\n"
    "  - {nf: DETECT, raises: [flagged], params: {pattern: x}}\n"
    "  - nf: BLOCK\n": ":4:9: error: NF 'block' (BLOCK): subscription 0 (*.flagged): 'flagged' "
    "is an event of the chain file: list it under `subscribes`",
    "events: [flagged]\nchain: [{nf: events}]\n": ":1:9: error: `events` maps event names",
}


def test_binary_reports_event_declaration_errors(
    binary: Path, sos: dict[str, Path], tmp_path: Path
) -> None:
    for i, (text, want) in enumerate(BAD.items()):
        f = tmp_path / f"c{i}.yaml"
        text = text.replace("DETECT", str(sos["detect"])).replace("BLOCK", str(sos["block"]))
        f.write_text(text)
        p = _run(binary, CAPTURE, "--chain", f, "--out", tmp_path, ok=False)
        want = want.replace("BLOCK", str(sos["block"]))
        assert p.returncode != 0 and f"{f}{want}" in p.stderr, (text, p.stderr)


def test_raise_is_refused_against_the_declaration(
    binary: Path, sos: dict[str, Path], tmp_path: Path
) -> None:
    """rg_nf_host.raise checks what the chain file says: a payload of other kinds than
    declared, or an event the NF's item does not list under `raises`, is not raised (the
    detector reports it): nothing is blocked, every frame is written."""
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    items = _detect_block(sos)
    wrong_kinds = {"flagged": {"reason": "num", "dir": "num", "offset": "num"}}
    cases = {
        "kinds": {
            "events": wrong_kinds,
            "chain": [items[0], {**items[1], "subscribes": ["flagged"]}],
        },
        "not-listed": {"events": EVENTS, "chain": [{**items[0], "raises": []}]},
    }
    for name, doc in cases.items():
        chain, out, written = tmp_path / f"{name}.yaml", tmp_path / name, tmp_path / f"{name}.pcap"
        chain.write_text(yaml.safe_dump(doc, sort_keys=False))
        p = _run(binary, CAPTURE, "--chain", chain, "--out", out, "--write", written)
        assert "detect: cannot raise 'flagged'" in p.stderr, (name, p.stderr[-500:])
        assert [d for _t, d in frames(written)] == [d for _t, d in frames(CAPTURE)], name
        assert not (out / "blocked.jsonl").exists() or not (out / "blocked.jsonl").read_text()
