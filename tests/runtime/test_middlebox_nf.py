"""Events between NFs with real clients through rubikgen inline (docs/nf.md, Events between
NFs): the client and server namespaces of tests/support/middlebox.py joined by the TCP/IP stack
(`--iface b0 --peer b1 --inline`) running the chain of the sample detector
(examples/nf/detect_nf.c, pattern `GET /flagged`) and the sample blocker
(examples/nf/block_nf.c), which drops or rejects the flow on the detector's event `flagged`.

Two curls to one Python http.server: `GET /blob` downloads its 300 kB byte for byte, `GET
/flagged` does not get through:
- with the blocker's drop_flow the request never reaches the server (its tcpdump sees the
  handshake of that connection and no byte from the client) and curl times out;
- with reject, curl fails at once with a reset (the box's RST for the request segment);
- with drop_flow and `inject: both` (rg_nf_host.inject) curl fails at once with a reset and
  the server's end of the connection gets a RST from the client's address at exactly its next
  expected sequence number (its tcpdump, tshark: checksum good), so both ends are closed.

Skipped with the reason where namespaces or the tools are missing."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.captures import REPO
from support.middlebox import SERVER, Box, box_or_skip, inline, tcpdump, wait_listening
from support.nf_chain import _cc
from support.oracle.tshark import _tshark

# namespaces, paced real traffic: run alone (ci/test.sh)
pytestmark = pytest.mark.serial


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    yield from box_or_skip()


@pytest.fixture(scope="module")
def www(box: Box, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("www")
    (root / "blob").write_bytes(hashlib.sha256(b"x").digest() * (300_000 // 32))
    (root / "flagged").write_bytes(b"must not arrive\n")
    p = box.server.popen(sys.executable, "-m", "http.server", "8080", "--bind", SERVER,
                         "--directory", str(root))  # fmt: skip
    try:
        wait_listening(box.server, "tcp", 8080)
        yield root
    finally:
        p.terminate()
        p.wait(timeout=10)


def _chain(tmp: Path, verdict: str, inject: str = "none") -> Path:
    d = tmp / "so"
    d.mkdir()
    ex = REPO / "examples" / "nf"
    items = [
        {"nf": str(_cc(ex / "detect_nf.c", d / "detect.so")), "raises": ["flagged"],
         "params": {"pattern": "GET /flagged"}},
        {"nf": str(_cc(ex / "block_nf.c", d / "block.so")), "subscribes": ["flagged"],
         "params": {"verdict": verdict, "inject": inject}},
    ]  # fmt: skip
    events = {"flagged": {"reason": "bytes", "dir": "num", "offset": "num"}}
    path = tmp / "chain.yaml"
    path.write_text(yaml.safe_dump({"events": events, "chain": items}, sort_keys=False))
    return path


def _curl(box: Box, path: str, out: Path, timeout: int) -> subprocess.CompletedProcess[str]:
    return box.client.run("curl", "-sS", "--max-time", str(timeout), "-o", str(out),
                          f"http://{SERVER}:8080/{path}")  # fmt: skip


def _client_bytes(pcap: Path) -> dict[str, int]:
    """Per client port whose SYN is in the capture (a connection of this test, not the last
    frames of an earlier one's), in the order they appear: the TCP payload bytes the server
    received from it."""
    args = ["-r", str(pcap), "-Y", f"ip.dst == {SERVER}", "-T", "fields"]
    out: dict[str, int] = {}
    fields = ["-e", "tcp.srcport", "-e", "tcp.len", "-e", "tcp.flags.syn"]
    for line in _tshark([*args, *fields]).splitlines():
        port, n, syn = line.split("\t")
        if syn == "1" or port in out:
            out[port] = out.get(port, 0) + int(n or 0)
    return out


@pytest.mark.parametrize("verdict", ["drop_flow", "reject", "inject"])
def test_flagged_flow_is_stopped_inline(
    box: Box, binary: Path, www: Path, tmp_path: Path, verdict: str
) -> None:
    spcap = tmp_path / "server.pcap"
    chain = (
        _chain(tmp_path, "drop_flow", "both") if verdict == "inject" else _chain(tmp_path, verdict)
    )
    with (
        tcpdump(box.server, "s0", spcap, "tcp port 8080"),
        inline(box, binary, tmp_path, "--chain", chain, "--out", tmp_path),
    ):
        # the flagged one first: its frames are in the server's capture before the download's
        bad = _curl(box, "flagged", tmp_path / "no", 3)
        ok = _curl(box, "blob", tmp_path / "got", 20)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "got").read_bytes() == (www / "blob").read_bytes()
    assert not (tmp_path / "no").exists() or b"must not" not in (tmp_path / "no").read_bytes()
    if verdict in ("reject", "inject"):
        # exit 56: failure receiving, "Connection reset by peer": the box's RST, not a timeout
        assert bad.returncode == 56 and "reset" in bad.stderr.lower(), bad.stderr
    else:
        assert bad.returncode == 28, bad.stderr  # timed out: its packets go nowhere
    # both connections reached the server (their handshakes), the flagged one without a byte
    first, second = _client_bytes(spcap).items()
    assert first[1] == 0 and second[1] > 50, (first, second)
    if verdict == "inject":
        _check_server_reset(spcap, first[0])
    blocked = (tmp_path / "blocked.jsonl").read_text().splitlines()
    assert len(blocked) == 1 and '"reason":"GET /flagged"' in blocked[0], blocked


def _check_server_reset(pcap: Path, port: str) -> None:
    """The server got a RST of the flagged connection from the client, checksum good, at
    exactly its RCV.NXT: the client's next sequence number after the handshake (the request
    was dropped), RFC 5961 3.2."""
    fields = ["ip.src", "tcp.srcport", "tcp.seq_raw", "tcp.len", "tcp.flags.syn",
              "tcp.flags.reset", "tcp.checksum.status"]  # fmt: skip
    args = ["-r", str(pcap), "-o", "tcp.check_checksum:TRUE", "-Y", f"tcp.port == {port}"]
    rows = [
        dict(zip(fields, ln.split("\t"), strict=True))
        for ln in _tshark(
            [*args, "-T", "fields", *[x for f in fields for x in ("-e", f)]]
        ).splitlines()
    ]
    syn = next(r for r in rows if r["ip.src"] != SERVER and r["tcp.flags.syn"] == "1")
    rst = [r for r in rows if r["ip.src"] != SERVER and r["tcp.flags.reset"] == "1"]
    assert len(rst) == 1, rows
    assert rst[0]["tcp.checksum.status"] == "1", rst
    assert int(rst[0]["tcp.seq_raw"]) == (int(syn["tcp.seq_raw"]) + 1) % 2**32, (syn, rst)
