"""The packet trace (issue 30 item 4): `rubikgen ctl SOCK trace N` on a binary built with
`--trace` (-DRG_TRACE), asked while a real capture is fed through a FIFO, compared frame by
frame with tshark's dissection of the same capture:

- the layers each traced frame went through are tshark's `frame.protocols`, kept to the
  protocols the stack has, in order; a layer's offset is where tshark's header starts
  (the Ethernet header's 14 bytes before IP);
- the TCP (UDP) instance is created at the first frame of each `tcp.stream` (`udp.stream`) and
  found at every later one, the same uid for one stream and another for each other stream;
- the PSM transitions agree with the TCP flags tshark shows (specs/protocols/tcp.yaml: a SYN
  without ACK opens SYN_SENT, a SYN-ACK SYN_RCVD, a RST terminates, `ack` takes a bare ACK),
  and a frame with data that tshark calls a retransmission is no in-order insert;
- the handler `tcp_data` runs only on frames with TCP payload;
- the verdict follows the rules file compiled in (a DNS query is dropped: tshark's
  udp.dstport 53) and the run's `--write` output holds exactly the frames that passed.

Also: `ctl trace` on a binary built without tracing is refused with the reason, and a bad N
(0, too many, not a number) or timeout is refused with its bounds.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.captures import REPO, STACK
from support.oracle import TRACES
from support.oracle.tshark import tshark_available
from support.paced_feed import PAUSE, PacedFeed, pcap_records

from rubikgen.cli.ctlsock import request

pytestmark = pytest.mark.serial  # paced input

CAPTURE = TRACES / "mixed-android-mobile.pcap"
START, COUNT = 100, 250  # trace 250 frames, asked after the first 100 were written

# tshark's protocol names for the stack's protocols (tcp_ip.yaml's layers)
TSHARK_PROTO = {
    "eth": "eth",
    "vlan": "vlan",
    "arp": "arp",
    "ip": "ip",
    "ipv6": "ipv6",
    "tcp": "tcp",
    "udp": "udp",
    "icmp": "icmp",
    "icmpv6": "icmpv6",
    "sll": "sll",
}
RULES = """\
spec: {stack}
rules:
  - {{name: dns, match: "udp.dport == 53", action: drop}}
"""


def _ctl(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rubikgen", "ctl", str(sock), *args]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=env, check=False)


def _wait_socket(sock: Path, proc: subprocess.Popen[str]) -> None:
    """Until the binary's control socket accepts connections."""
    deadline = time.monotonic() + 20
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, "no control socket"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(str(sock))
                # answered by the control thread at once (refused), while the packet loop
                # waits for input
                s.sendall(b"trace\t0\n")
                s.recv(4096)
                return
            except OSError:
                time.sleep(0.02)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rubikgen.pipeline import Compilation
    from rubikgen.toolchain.build import build_compilation

    rules = tmp_path_factory.mktemp("rules") / "dns.rules.yaml"
    rules.write_text(RULES.format(stack=STACK))
    comp = Compilation(STACK, rules=str(rules))
    out = REPO / "build" / "tcp_ip-rules-dns-trace-test"
    return build_compilation(comp, out, cflags=["-DRG_TRACE"], quiet=True).binary


@pytest.fixture(scope="module")
def untraced() -> Path:
    from rubikgen.toolchain.build import build

    return build(STACK, REPO / "build" / "tcp_ip", quiet=True).binary


def _frames(pcap: Path) -> dict[int, dict[str, str]]:
    fields = ["frame.number", "frame.protocols", "tcp.stream", "udp.stream", "tcp.flags.syn"]
    fields += ["tcp.flags.ack", "tcp.flags.reset", "tcp.flags.fin", "tcp.len", "udp.dstport"]
    fields += ["tcp.analysis.retransmission", "ip.hdr_len"]
    cmd = ["tshark", "-n", "-r", str(pcap), "-T", "fields", "-E", "occurrence=f"]
    for f in fields:
        cmd += ["-e", f]
    env = dict(os.environ, LC_ALL="C")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    rows = {}
    for line in out.splitlines():
        vals = line.split("\t")
        row = dict(zip(fields, vals + [""] * (len(fields) - len(vals)), strict=True))
        rows[int(row["frame.number"])] = row
    return rows


def _known_protocols(row: dict[str, str]) -> list[str]:
    """tshark's protocols of the frame that the stack has, up to the first it has not (a
    header tshark reads inside one the stack leaves alone is not the stack's)."""
    out = []
    for p in row["frame.protocols"].split(":"):
        if p == "ethertype":
            continue
        if p not in TSHARK_PROTO:
            break
        out.append(TSHARK_PROTO[p])
    return out


def _run_traced(
    binary: Path, tmp_path: Path, extra: tuple[str, ...] = ()
) -> tuple[list[dict[str, Any]], Path, str]:
    """The capture through a FIFO, `trace COUNT` asked after START frames; the traced
    packets, the --write output and the run's summary."""
    fifo, sock, out, written = (tmp_path / n for n in ("in.pcap", "ctl.sock", "out", "w.pcap"))
    os.mkfifo(fifo)
    argv = [str(binary), str(fifo), "--control", str(sock), "--nf", "flowstats"]
    argv += ["--out", str(out), "--summary", "json", *extra]
    argv += [] if extra else ["--write", str(written)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    go = threading.Event()
    feed = PacedFeed(fifo, CAPTURE, lambda i: go.wait(60) and PAUSE if i + 1 == START else PAUSE)
    feed.start()
    try:
        feed.wait_written(START, lambda: proc.poll() is None)
        _wait_socket(sock, proc)
        result: dict[str, tuple[bool, str]] = {}
        # the request from this process (no interpreter to start): armed at once, while
        # the traffic waits; then the traffic goes on
        asker = threading.Thread(
            target=lambda: result.update(j=request(str(sock), ["trace", str(COUNT), "30"], 90))
        )
        asker.start()
        time.sleep(0.5)
        go.set()
        asker.join(60)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        go.set()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    ok, text = result["j"]
    assert ok, text
    head, *lines = text.splitlines()
    assert json.loads(head) == {
        "asked": COUNT,
        "traced": COUNT,
        "timeout_s": 30,
        "timed_out": False,
        "stack": "tcp_ip",
    }
    return [json.loads(line) for line in lines], written, stdout


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
def test_trace_agrees_with_tshark(traced: Path, tmp_path: Path) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    pkts, written, _ = _run_traced(traced, tmp_path)
    assert len(pkts) == COUNT
    frames = _frames(CAPTURE)
    numbers = [p["packet"] for p in pkts]
    # one context, every frame an Ethernet one: the packet number is tshark's frame number
    assert numbers == list(range(numbers[0], numbers[0] + COUNT)), numbers[:5]
    assert START < numbers[0] <= START + 50
    first_of: dict[tuple[str, str], int] = {}
    for n in sorted(frames):
        for proto in ("tcp", "udp"):
            s = frames[n][f"{proto}.stream"]
            if s:
                first_of.setdefault((proto, s), n)
    uid_of: dict[tuple[str, str], int] = {}
    checked = {"created": 0, "syn": 0, "synack": 0, "data": 0, "drop": 0, "late": 0}

    def ended_before(stream: str, n: int) -> bool:
        return any(
            frames[k]["tcp.stream"] == stream
            and (frames[k]["tcp.flags.reset"] == "1" or frames[k]["tcp.flags.fin"] == "1")
            for k in range(1, n)
        )

    for p in pkts:
        row = frames[p["packet"]]
        steps = p["steps"]
        layers = [s for s in steps if s["step"] == "layer"]
        assert [s["protocol"] for s in layers] == _known_protocols(row), (p["packet"], row)
        assert layers[0]["offset"] == 0 and layers[0]["length"] == p["caplen"]
        if len(layers) > 1 and layers[1]["protocol"] == "ip":
            assert layers[1]["offset"] == 14
            if len(layers) > 2:
                assert layers[2]["offset"] == 14 + int(row["ip.hdr_len"]), p["packet"]
        assert all(s["ok"] for s in steps if s["step"] == "parsed"), p["packet"]
        for proto in ("tcp", "udp"):
            stream = row[f"{proto}.stream"]
            inst = [s for s in steps if s["step"] == "instance" and s["layer"] == proto]
            if not stream or not inst:
                continue
            (i,) = inst
            first = first_of[(proto, stream)] == p["packet"]
            assert i["action"] == ("created" if first else "found"), (p["packet"], i)
            checked["created"] += first
            key = (proto, stream)
            if key in uid_of:
                assert uid_of[key] == i["uid"], (p["packet"], key)
            else:
                assert i["uid"] not in uid_of.values(), (p["packet"], key)
                uid_of[key] = i["uid"]
        late = [s for s in steps if s["step"] == "note" and "late packet" in s["note"]]
        if late:  # the connection had ended (a FIN or RST before, says tshark): no PSM runs
            assert row["tcp.stream"] and ended_before(row["tcp.stream"], p["packet"]), p
            checked["late"] += 1
        elif row["tcp.stream"]:
            syn, ack, rst = (row[f"tcp.flags.{f}"] == "1" for f in ("syn", "ack", "reset"))
            psm = [s for s in steps if s["step"] == "psm" and s["layer"] == "tcp"]
            assert len(psm) == 1, (p["packet"], psm)
            t = psm[0]
            if syn and not ack and t["from"] == "CLOSED":
                assert (t["transition"], t["to"]) == ("syn", "SYN_SENT"), p["packet"]
                checked["syn"] += 1
            if syn and ack and t["from"] in ("CLOSED", "SYN_SENT"):
                assert (t["transition"], t["to"]) == ("synack", "SYN_RCVD"), p["packet"]
                checked["synack"] += 1
            if rst:
                assert t["to"] == "TERMINATE", p["packet"]
            if t["transition"] in ("syn", "synack"):
                assert syn, p["packet"]
            if t["transition"] == "ack":
                assert ack and not syn and t["to"] == "EST", p["packet"]
            assert t["transition"] is None or t["spec"].startswith("../protocols/tcp.yaml:")
            seq = [s for s in steps if s["step"] == "sequence" and s["layer"] == "tcp"]
            if row["tcp.analysis.retransmission"] and int(row["tcp.len"] or 0) > 0 and seq:
                assert seq[0]["action"] != "in order", p["packet"]
            calls = [s for s in steps if s["step"] == "handler" and s["handler"] == "tcp_data"]
            if calls:
                assert int(row["tcp.len"]) > 0, p["packet"]
                checked["data"] += 1
        drop = row["udp.dstport"] == "53"
        assert p["verdict"] == ("drop" if drop else "pass"), (p["packet"], p["verdict"])
        checked["drop"] += drop
        assert p["nfs"] == ["flowstats"]
        assert p["lost_steps"] == 0
    # the window held each kind of case
    assert all(checked.values()), checked
    # --write holds the frames that passed (their bytes: the record headers are its own)
    _, recs = pcap_records(CAPTURE)
    _, out = pcap_records(written)
    out_set = {r[16:] for r in out}
    assert out_set <= {r[16:] for r in recs}
    for p in pkts:
        assert (recs[p["packet"] - 1][16:] in out_set) == (p["verdict"] == "pass"), p["packet"]


def test_trace_on_workers(traced: Path, tmp_path: Path) -> None:
    """--workers 2: the next N packets of whichever worker, each worker's in its order, and
    each flow's packets on one worker (the symmetric hash), all Ethernet frames traced whole."""
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    pkts, _, stdout = _run_traced(traced, tmp_path, ("--workers", "2"))
    assert len(pkts) == COUNT
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert {p["worker"] for p in pkts} <= {0, 1}
    for w in (0, 1):
        nums = [p["packet"] for p in pkts if p["worker"] == w]
        assert nums == sorted(nums) and len(set(nums)) == len(nums)
        assert all(n <= summary["workers"][w] for n in nums)
    worker_of: dict[tuple[Any, ...], int] = {}  # uids are per worker: the flow by its key
    for p in pkts:
        assert p["steps"][0]["layer"] == "eth" and p["steps"][0]["offset"] == 0
        for s in p["steps"]:
            if s["step"] == "instance" and s["action"] != "none" and s["layer"] == "tcp":
                key = (s["src"], s["sport"], s["dst"], s["dport"])
                assert worker_of.setdefault(key, p["worker"]) == p["worker"], p["packet"]
    assert worker_of


def test_trace_text_form(traced: Path, tmp_path: Path) -> None:
    """The text form: one block per packet, its layers with their offsets, the verdict."""
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    fifo, sock = tmp_path / "in.pcap", tmp_path / "ctl.sock"
    os.mkfifo(fifo)
    argv = [str(traced), str(fifo), "--control", str(sock), "--nf", "count"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    go = threading.Event()
    feed = PacedFeed(fifo, CAPTURE, lambda i: go.wait(60) and PAUSE if i == 0 else PAUSE)
    feed.start()
    try:
        feed.wait_written(1, lambda: proc.poll() is None)
        _wait_socket(sock, proc)
        res: dict[str, subprocess.CompletedProcess[str]] = {}
        t = threading.Thread(target=lambda: res.update(t=_ctl(sock, "trace", "3")))
        t.start()
        time.sleep(3)  # `rubikgen ctl` has started and asked: the traffic goes on
        go.set()
        t.join(60)
        proc.communicate(timeout=60)
    finally:
        go.set()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    r = res["t"]
    assert r.returncode == 0, r.stderr
    blocks = [b for b in r.stdout.split("\n\n") if b.strip()]
    assert len(blocks) == 3
    for b in blocks:
        lines = b.splitlines()
        assert lines[0].startswith("Packet ") and "entry eth" in lines[0]
        assert lines[1].split()[:2] == ["eth", "@0"]
        assert lines[-1].strip() in ("ok, verdict pass", "ok, verdict drop")


def test_trace_refusals(untraced: Path, traced: Path, tmp_path: Path) -> None:
    """A build without tracing says so; bad N and timeouts are refused with their bounds."""
    for binary, name in ((untraced, "plain"), (traced, "traced")):
        fifo, sock = tmp_path / f"{name}.pcap", tmp_path / f"{name}.sock"
        os.mkfifo(fifo)
        proc = subprocess.Popen(
            [str(binary), str(fifo), "--control", str(sock), "--nf", "count"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        head, _ = pcap_records(CAPTURE) if CAPTURE.is_file() else (b"", [])
        w = open(fifo, "wb", buffering=0)  # noqa: SIM115 (held open while asking)
        try:
            w.write(head or bytes.fromhex("d4c3b2a1020004000000000000000000ffff000001000000"))
            _wait_socket(sock, proc)
            if name == "plain":
                r = _ctl(sock, "trace", "5")
                assert r.returncode == 1
                assert "built without packet tracing" in r.stderr, r.stderr
                assert "--trace" in r.stderr
                continue
            for n, why in (
                ("0", "1 to 1000"),
                ("1001", "1 to 1000"),
                ("ten", "1 to 1000"),
                ("99999999999", "1 to 1000"),
            ):
                r = _ctl(sock, "trace", n)
                assert r.returncode == 1 and why in r.stderr, (n, r.stderr)
            r = _ctl(sock, "trace", "5", "--wait", "0")
            assert r.returncode == 1 and "seconds, 1 to 3600" in r.stderr, r.stderr
            # no packet comes: the wait ends with what was traced (none), said on stderr
            r = _ctl(sock, "trace", "5", "--wait", "1", "--format", "json")
            assert r.returncode == 0 and r.stdout == "", r.stderr
            assert "0 of 5 packets traced within 1 s" in r.stderr
        finally:
            w.close()
            proc.communicate(timeout=30)
        assert proc.returncode == 0
