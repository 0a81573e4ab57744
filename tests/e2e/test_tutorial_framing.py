"""The tutorial's line protocol (docs/tutorial/ftp_lines.yaml in docs/tutorial/ftp_stack.yaml,
docs/tutorial.md step 14) built and run: on an FTP control connection with one line per
segment, the lines its handler gets equal tshark's FTP dissection (command and argument,
reply code and argument); the same bytes cut anywhere, several lines to a segment or a line
over several, give the same lines; a line over the bound is dropped, and after a lost
segment no partial line is handed on."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
from support import REPO_ROOT
from support.oracle.tshark import _tshark, tshark_available
from support.quic_captures import SANITIZER
from support.tls_streams import connection, write

from rubikgen.toolchain.build import build

pytestmark = pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")

CLIENT = [b"USER anonymous", b"PASS guest@example.org", b"SYST", b"PWD", b"CWD /pub/a b", b"QUIT"]
SERVER = [b"220 (vsFTPd 3.0.3)", b"331 Please specify the password.", b"230 Login successful.",
          b"215 UNIX Type: L8", b'257 "/" is the current directory', b"250 OK.", b"221 Goodbye."]  # fmt: skip


def stream(lines: list[bytes]) -> bytes:
    return b"".join(x + b"\r\n" for x in lines)


def boundaries(lines: list[bytes]) -> list[int]:
    out, n = [], 0
    for x in lines:
        n += len(x) + 2
        out.append(n)
    return out


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ftp_stack")
    return build(REPO_ROOT / "docs" / "tutorial" / "ftp_stack.yaml", d, quiet=True).binary


def run(binary: Path, pcap: Path, out: Path) -> dict[int, list[tuple[bool, bytes]]]:
    """Per client port, the lines ftp_line got, in order, each with its direction."""
    r = subprocess.run(
        [str(binary), str(pcap), "--nf", "events", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert not any(s in r.stderr for s in SANITIZER), r.stderr[-3000:]
    got: dict[int, list[tuple[bool, bytes]]] = {}
    for line in (out / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("handler") != "ftp_line":
            continue
        a = e["args"]
        port = a["sport"] if a["from_client"] else a["dport"]
        got.setdefault(port, []).append((bool(a["from_client"]), bytes.fromhex(a["line"]["hex"])))
    return got


def tshark_lines(pcap: Path) -> list[tuple[bool, bytes]]:
    text = _tshark(["-r", str(pcap), "-Y", "ftp", "-T", "fields", "-E", "separator=\t",
                    "-e", "ftp.request.command", "-e", "ftp.request.arg",
                    "-e", "ftp.response.code", "-e", "ftp.response.arg"])  # fmt: skip
    out = []
    for row in text.splitlines():
        cmd, arg, code, rarg = (row.split("\t") + ["", "", "", ""])[:4]
        if cmd:
            out.append((True, (cmd + (" " + arg if arg else "")).encode()))
        else:
            out.append((False, (code + (" " + rarg if rarg else "")).encode()))
    return out


def test_lines_equal_tshark(binary: Path, tmp_path: Path) -> None:
    c, s = stream(CLIENT), stream(SERVER)
    pcap = write(tmp_path / "ftp.pcap", connection(41000, c, s, boundaries(CLIENT),
                                                   boundaries(SERVER), port=21))  # fmt: skip
    want = tshark_lines(pcap)
    assert len(want) == len(CLIENT) + len(SERVER)
    got = run(binary, pcap, tmp_path)
    mine = got[41000]
    # this capture sends the client's lines, then the server's: the order of each direction
    assert [x for x in mine if x[0]] == [x for x in want if x[0]]
    assert [x for x in mine if not x[0]] == [x for x in want if not x[0]]


def test_any_segmentation(binary: Path, tmp_path: Path) -> None:
    c, s = stream(CLIENT), stream(SERVER)
    want = [(True, x) for x in CLIENT] + [(False, x) for x in SERVER]
    rng = random.Random(14)
    frames: list[bytes] = []
    for i in range(60):
        cc = [rng.randrange(1, len(c)) for _ in range(rng.randrange(0, 10))]
        sc = [rng.randrange(1, len(s)) for _ in range(rng.randrange(0, 10))]
        frames += connection(42000 + i, c, s, cc, sc, port=21)
    got = run(binary, write(tmp_path / "cuts.pcap", frames), tmp_path)
    assert got == {42000 + i: want for i in range(60)}


def test_long_line_and_gap(binary: Path, tmp_path: Path) -> None:
    """A 5000-byte line (over max: 4096) is dropped, the lines around it kept; a lost segment
    in the middle of a line drops that line and nothing after the gap is half a line."""
    c = stream([b"USER a", b"X" * 5000, b"PWD"])
    s = stream(SERVER[:2])
    frames = connection(43000, c, s, [100, 3000, 5008], port=21)
    lines = [b"NOOP", b"RETR file-with-a-long-name.txt", b"QUIT"]
    c2 = stream(lines)
    cut = [4, 16, 30]  # the second segment (bytes 4..16) is lost: inside RETR's line
    frames += connection(43001, c2, s, cut, drop=[1], port=21)
    got = run(binary, write(tmp_path / "odd.pcap", frames), tmp_path)
    assert [x for f, x in got[43000] if f] == [b"USER a", b"PWD"]
    client2 = [x for f, x in got[43001] if f]
    assert client2 == [b"QUIT"] or client2 == [], client2
    assert all(x in lines for x in client2)
