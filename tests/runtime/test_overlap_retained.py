"""Insertion/evasion: a retransmission of delivered, unacknowledged bytes is compared (issue 27
item 6).

A crafted capture (scapy, tests/support/captures.py) holds one connection per case; the client sends
bytes that are delivered at once (in order: the fast path), then sends bytes at the same
sequence numbers again:

* `good_evil`: `GOOD` at sequence 1, then `EVIL` at sequence 1 before any ACK (Ptacek-Newsham);
* `same`: `GOOD` twice: an ordinary retransmission;
* `partial`: `GOODBYE`, then `DEVIL` over its last four bytes (different) and one byte after;
* `after_ack`: `GOOD`, the server's ACK of it, then `EVIL`: acknowledged bytes are not kept,
  so the repeat is not compared (counted with the same-data overlaps, no event).

The reference is tshark's dissection, not ours: its relative sequence numbers, lengths, payload
bytes and ACKs give, for each repeating client frame (which tshark flags as
`tcp.analysis.retransmission` where it repeats only old bytes), the old bytes it repeats that
the server had not acknowledged when it came, and whether they differ. The stock `tcp_ip`
stack with the `events` NF must raise one `overlap` line exactly for each frame whose
unacknowledged repeated bytes differ (sequence number and length of those bytes, `won: old`:
delivered bytes are never replaced), and the summary's `overlaps` must count them as
`different` and the other repeats as `same`. The same stack with the tcp layers' option
`retain_unacked: false` keeps nothing: every repeat is `same`, no event (the old behaviour).
tshark's `tcp.segment.overlap.conflict` applies only to segments it reassembles into a PDU for
a dissector, which these payloads are not: not compared.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.captures import CLIENT4, REPO, SERVER4, TPORT, C, Capture, S, Tcp, rubikgen_command
from support.oracle import tshark_available

CASES: dict[str, list[tuple[str, int, bytes]]] = {
    # (who, client stream offset, bytes); who "ack": the server acknowledges all it received
    "good_evil": [("c", 0, b"GOOD"), ("c", 0, b"EVIL")],
    "same": [("c", 0, b"GOOD"), ("c", 0, b"GOOD")],
    "partial": [("c", 0, b"GOODBYE"), ("c", 3, b"DEVIL")],
    "after_ack": [("c", 0, b"GOOD"), ("ack", 0, b""), ("c", 0, b"EVIL")],
}
PORT0 = 47000
#: tcp.yaml's overlap policy: its sequence's `overlap_policy` / `overwrite`, else the default
#: (docs/spec-language.md: `first`); what the events say chose
SPEC_POLICY = next(
    (
        line.split(":", 1)[1].split("#")[0].strip()
        for line in (REPO / "specs" / "protocols" / "tcp.yaml").read_text().splitlines()
        if line.strip().startswith(("overlap_policy:", "overwrite:"))
    ),
    "first",
)


@pytest.fixture(scope="module")
def pcap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    cap = Capture()
    for k, steps in enumerate(CASES.values()):
        t = Tcp(cap, (CLIENT4, PORT0 + k), (SERVER4, TPORT), isn=(0x10000 * (k + 1), 99))
        t.handshake()
        for who, off, data in steps:
            if who == "ack":
                t.send(S, flags="A")
            else:
                t.send(C, data, off=off, ack=t.ack_for(C))
        t.send(S, flags="A")
        t.close()
    return cap.write(tmp_path_factory.mktemp("retain") / "retain.pcap")


def _tshark(pcap: Path) -> list[dict[str, str]]:
    fields = ["frame.number", "tcp.srcport", "tcp.dstport", "tcp.seq", "tcp.seq_raw", "tcp.len"]
    fields += ["tcp.ack", "tcp.flags.ack", "tcp.payload", "tcp.analysis.retransmission"]
    args = ["tshark", "-n", "-r", str(pcap), "-Y", "tcp", "-T", "fields", "-E", "occurrence=f"]
    for f in fields:
        args += ["-e", f]
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [dict(zip(fields, line.split("\t"), strict=True)) for line in text.splitlines()]


def _expected(
    pcap: Path, ports: dict[int, str] | None = None, server: int = TPORT
) -> dict[int, tuple[list[tuple[int, int, int]], int]]:
    """Per client port: [(raw seq, bytes, segment length)] of each repeat whose unacknowledged
    old bytes differ, and the number of repeats whose bytes were all the same or
    acknowledged."""
    rows = _tshark(pcap)
    out: dict[int, tuple[list[tuple[int, int, int]], int]] = {}
    if ports is None:
        ports = {PORT0 + k: name for k, name in enumerate(CASES)}
    srv = server
    for port, name in ports.items():
        have: dict[int, int] = {}  # relative seq -> the first byte seen there
        acked = 0  # relative: what the server acknowledged of the client's bytes
        diff: list[tuple[int, int, int]] = []
        same = 0
        for r in rows:
            if r["tcp.srcport"] == str(srv) and r["tcp.dstport"] == str(port):
                if r["tcp.flags.ack"] in ("1", "True"):
                    acked = max(acked, int(r["tcp.ack"]))
                continue
            if r["tcp.srcport"] != str(port) or int(r["tcp.len"]) == 0:
                continue
            seq, data = int(r["tcp.seq"]), bytes.fromhex(r["tcp.payload"].replace(":", ""))
            old = [i for i in range(len(data)) if seq + i in have]
            if old and all(seq + i in have for i in range(len(data))):
                assert r["tcp.analysis.retransmission"], f"{name}: tshark sees no retransmission"
            unacked = [i for i in old if seq + i >= acked]
            if unacked and any(have[seq + i] != data[i] for i in unacked):
                seq_raw = (int(r["tcp.seq_raw"]) + unacked[0]) % (1 << 32)
                diff.append((seq_raw, len(unacked), len(data)))
            elif old:
                same += 1
            for i, b in enumerate(data):
                have.setdefault(seq + i, b)
        out[port] = (diff, same)
    return out


def _stack(tmp: Path, retain: bool) -> Path:
    """tcp_ip as it is, or with `retain_unacked: false` on its tcp layers."""
    if retain:
        return REPO / "specs" / "stacks" / "tcp_ip.yaml"
    text = (REPO / "specs" / "stacks" / "tcp_ip.yaml").read_text()
    text = text.replace("stack: tcp_ip\n", "stack: tcp_ip_noretain\n")
    text = text.replace("../protocols/", f"{REPO / 'specs' / 'protocols'}/")
    for layer, ip in (("tcp:  ", "ip"), ("tcp6: ", "ipv6")):
        old = f"  {layer}{{protocol: {REPO / 'specs' / 'protocols'}/tcp.yaml, args: {{ip: {ip}}}}}"
        assert old in text, old
        new = old[:-1] + ", options: {retain_unacked: false}}"
        text = text.replace(old, new)
    path = tmp / "tcp_ip_noretain.yaml"
    path.write_text(text)
    return path


def _run(
    stack: Path, pcap: Path, out: Path, *args: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    argv = [*rubikgen_command(), "run", str(stack), str(pcap), "--nf", "events", "--out"]
    argv += [str(out), "--build-dir", str(out.parent / f"build-{stack.stem}"), "--summary", "json"]
    argv += ["--", *args] if args else []
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return lines, summary


@pytest.mark.parametrize(
    ("retain", "policy"),
    [(True, None), (True, "last"), (False, None)],
    ids=["retain", "retain-last", "no-retain"],
)
def test_repeat_of_unacked_bytes_is_compared(
    pcap: Path, tmp_path: Path, retain: bool, policy: str | None
) -> None:
    """Each overlap event also carries both versions' lengths (old_len: the delivered bytes
    compared; new_len: the repeating segment's, tshark's tcp.len) and the policy that chose:
    the stack's (tcp.yaml) or --overlap-policy's; delivered bytes are never replaced, so the
    old copy wins under any policy."""
    want = _expected(pcap)
    assert want[PORT0][0] and want[PORT0 + 2][0]  # good_evil and partial differ
    assert not want[PORT0 + 3][0]  # after_ack: acknowledged, not compared
    args = ("--overlap-policy", policy) if policy else ()
    lines, summary = _run(_stack(tmp_path, retain), pcap, tmp_path / f"out-{retain}", *args)
    ovl = [x for x in lines if x.get("event") == "overlap"]
    mem = summary["layers"]["tcp"]["memory"]["overlaps"]
    ndiff = sum(len(d) for d, _ in want.values())
    nsame = sum(s for _, s in want.values())
    if not retain:
        assert ovl == []
        assert mem == {"same": ndiff + nsame, "different": 0}
        return
    assert mem == {"same": nsame, "different": ndiff}, (mem, want)
    got = sorted(
        (x["seq"], x["len"], x["new_bytes"], x["won"], x["old_len"], x["new_len"]) for x in ovl
    )
    assert got == sorted(
        (seq, n, 0, "old", n, seg) for d, _ in want.values() for seq, n, seg in d
    ), ovl
    assert {x["policy"] for x in ovl} == {policy or SPEC_POLICY}, ovl


@pytest.mark.parametrize(
    ("retain", "extra", "message"),
    [
        ("option.nope", "", "is not option.NAME of a boolean option"),
        ("yes_please", "", "is not option.NAME of a boolean option"),
        ("true", "  buffer_data: false\n", "retain needs a byte sequence that buffers data"),
    ],
)
def test_retain_errors_name_the_line(tmp_path: Path, retain: str, extra: str, message: str) -> None:
    """A bad `retain` is an error at its line, not a traceback."""
    text = (REPO / "specs" / "protocols" / "tcp.yaml").read_text()
    old = "  retain: option.retain_unacked\n"
    assert old in text
    text = text.replace(old, f"  retain: {retain}\n{extra}")
    spec = tmp_path / "tcp.yaml"
    spec.write_text(text.replace("protocol: [ip.yaml, ipv6.yaml]", "protocol: []"))
    line = text.splitlines().index(f"  retain: {retain}") + 1
    proc = subprocess.run(
        [*rubikgen_command(), "validate", str(spec)], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"tcp.yaml:{line}:" in proc.stdout + proc.stderr and message in proc.stdout + proc.stderr


def test_real_crafted_trace(tmp_path: Path) -> None:
    """tcp-overlap-partial-crafted.pcap (../shared/traces): `GOOD` at 1, then `XXX` at 2 before
    the ACK, which tshark flags as a retransmission; its bytes differ from the delivered `OOD`:
    one `different` overlap, where the stack without retention counted one `same`."""
    from support.oracle import TRACES

    src = TRACES / "tcp-overlap-partial-crafted.pcap"
    if not src.is_file() or not tshark_available():
        pytest.skip(f"{src.name} or tshark is missing")
    want = _expected(src, {12345: "trace"}, 8080)[12345]
    assert want[0], want
    lines, summary = _run(_stack(tmp_path, True), src, tmp_path / "out")
    mem = summary["layers"]["tcp"]["memory"]["overlaps"]
    assert mem == {"same": want[1], "different": len(want[0])}
    got = [(x["seq"], x["len"], x["new_len"]) for x in lines if x.get("event") == "overlap"]
    assert got == want[0]
