"""The QUIC stack (specs/stacks/quic.yaml) against independent references.

* Every QUIC capture in ../shared/traces (found through MANIFEST.tsv's stacks_covered and
  features columns, gQUIC included: it must simply not crash): per connection and direction,
  the Initial-space CRYPTO bytes the stack delivers to the streams NF equal what tshark's own
  Initial decryption shows, reassembled by offset in tests/support/oracle/quic_crypto.py.
* A hand-made capture (tests/support/quic_initial.py, protected with Python's `cryptography`): a
  ClientHello split over Initials sent out of order and coalesced, a retransmission, a packet
  with a bad tag, a packet cut by the snaplen, a Retry, QUIC v2; the bytes the capture's author
  put in, which tshark agrees with too.
* Random and mutated datagrams to port 443 under ASan/UBSan.

Each binary (plain and sanitized) is built once per module.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
from support import REPO_ROOT
from support.oracle.quic_crypto import initial_crypto
from support.oracle.tshark import tshark_available
from support.quic_captures import CAPTURES, SANITIZER, TRACES
from support.quic_initial import write_capture, write_pcap

from rubikgen.pipeline import Compilation
from rubikgen.toolchain.build import build_compilation

REPO = REPO_ROOT
STACK = REPO / "specs" / "stacks" / "quic.yaml"


@pytest.fixture(scope="module")
def binaries() -> dict[bool, Path]:
    # build/quic, shared with test_stacks.py and test_tls_hello.py: each binary compiles once
    out_dir = REPO / "build" / "quic"
    comp = Compilation(STACK)  # generated once for both
    return {
        san: build_compilation(comp, out_dir, sanitize=san, quiet=True).binary
        for san in (False, True)
    }


def run(binary: Path, pcap: Path, out: Path) -> tuple[dict, str]:
    r = subprocess.run(
        [
            str(binary),
            str(pcap),
            "--nf",
            "streams",
            "--out",
            str(out),
            "--summary",
            "json",
            "--stats",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert not any(s in r.stderr for s in SANITIZER), r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def delivered(out: Path) -> dict[tuple[str, int, str, int], bytes]:
    """The CRYPTO bytes per flow direction (src, sport, dst, dport) the streams NF wrote."""
    got: dict[tuple[str, int, str, int], bytes] = {}
    for line in (out / "flows.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if not rec["layer"].startswith("quic_frame"):
            continue
        key = (rec["src"], rec["sport"], rec["dst"], rec["dport"])
        data = (out / rec["file"]).read_bytes() if rec["file"] else b""
        assert len(data) == rec["bytes"]
        assert key not in got, f"two records for {key}"
        got[key] = data
    return got


def stat(stderr: str, layer: str, counter: str) -> int:
    """A counter of the --stats table (0 when absent)."""
    total = 0
    for line in stderr.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == layer and parts[1] == counter:
            total += int(parts[2])
    return total


def test_manifest_lists_quic_captures() -> None:
    if not TRACES.is_dir():
        pytest.skip(f"{TRACES} is absent")
    assert any("quic-v1" in c for c in CAPTURES) and any("quic-v2" in c for c in CAPTURES)


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
@pytest.mark.parametrize("capture", CAPTURES)
def test_initial_crypto_equals_tshark(
    capture: str, sanitize: bool, binaries: dict[bool, Path], tmp_path: Path
) -> None:
    pcap = TRACES / capture
    summary, _ = run(binaries[sanitize], pcap, tmp_path)
    assert summary["packets"] > 0
    got = {k: v for k, v in delivered(tmp_path).items() if v}
    want = {k: v.assembled() for k, v in initial_crypto(pcap).items() if v.assembled()}
    assert got.keys() == want.keys(), (sorted(got), sorted(want))
    for k in want:
        assert got[k] == want[k], (k, len(got[k]), len(want[k]))


def test_real_captures_deliver_client_hellos() -> None:
    """What the comparison above covers: a ClientHello in both QUIC versions (no vacuous pass)."""
    if not TRACES.is_dir() or not tshark_available():
        pytest.skip("captures or tshark absent")
    for name in ("quic-v1-chromium.pcap", "quic-v2-http3.pcap"):
        dirs = initial_crypto(TRACES / name)
        assert any(d.assembled()[:1] == b"\x01" for d in dirs.values()), name  # ClientHello
        assert any(d.assembled()[:1] == b"\x02" for d in dirs.values()), name  # ServerHello


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
def test_hand_made_initials(sanitize: bool, binaries: dict[bool, Path], tmp_path: Path) -> None:
    pcap = tmp_path / "initials.pcap"
    exp = write_capture(pcap)
    if tshark_available():  # the capture is what its author says: tshark decrypts it alike
        ref = {k: v.assembled() for k, v in initial_crypto(pcap).items()}
        assert ref == exp.crypto
    _, stderr = run(binaries[sanitize], pcap, tmp_path / "out")
    assert delivered(tmp_path / "out") == exp.crypto
    # the forged packet and the one cut by the snaplen are counted, not delivered
    failed = stat(stderr, "quic_header", "error.decrypt_failed")
    assert failed + stat(stderr, "quic_header", "error.truncated") == exp.rejected + 1, stderr


def test_random_and_mutated_datagrams(binaries: dict[bool, Path], tmp_path: Path) -> None:
    """Random bytes and bit-flipped real Initials to port 443 under ASan/UBSan: no crash, no
    report; mutated Initials never authenticate, so nothing but the intact ones is delivered."""
    base = tmp_path / "base.pcap"
    write_capture(base)
    raw = base.read_bytes()
    frames: list[tuple[bytes, int]] = []
    off = 24
    while off < len(raw):
        n = int.from_bytes(raw[off + 8 : off + 12], "little")
        wire = int.from_bytes(raw[off + 12 : off + 16], "little")
        frames.append((raw[off + 16 : off + 16 + n], wire))
        off += 16 + n
    rng = random.Random(4242)
    fuzz: list[tuple[bytes, int]] = []
    for _ in range(300):
        data, wire = rng.choice(frames)
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(42, len(b))  # after Ethernet/IPv4/UDP
            b[i] ^= 1 << rng.randrange(8)
        cut = rng.choice([len(b), rng.randrange(42, len(b) + 1)])
        fuzz.append((bytes(b[:cut]), wire if cut == len(b) else wire))
    for _ in range(200):  # random payloads behind a valid UDP header to port 443
        head = bytearray(frames[0][0][:42])
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 1300)))
        if body and rng.random() < 0.5:
            body = bytes([0xC0 | rng.randrange(64)]) + (1).to_bytes(4, "big") + body
        udp_len = 8 + len(body)
        head[38:40] = udp_len.to_bytes(2, "big")
        head[16:18] = (20 + udp_len).to_bytes(2, "big")
        head[24:26] = b"\x00\x00"  # IPv4 checksum: not checked by the stack
        fuzz.append((bytes(head) + body, 42 + len(body)))
    pcap = tmp_path / "fuzz.pcap"
    write_pcap(pcap, fuzz)
    summary, stderr = run(binaries[True], pcap, tmp_path / "out")
    assert summary["packets"] == len(fuzz)
    assert stat(stderr, "quic_header", "error.decrypt_failed") > 0
