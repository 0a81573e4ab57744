"""Every stock stack compiles warning-free (-O2 -Wall -Wextra -Werror), and the ASan/UBSan
build of each runs cleanly on the real captures of its protocols (tcp_ip has its own, much
deeper end-to-end suites: test_e2e_tshark.py, test_e2e_edge.py)."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.pipeline import Compilation
from rubikgen.toolchain.build import build_compilation

REPO = REPO_ROOT
TRACES = REPO.parent / "shared" / "traces"
STACKS = ["tcp_ip", "gtp", "pptp", "quic", "sctp", "tcp_tls"]

# Captures each tunnelled / non-TCP stack parses, and a handler that must be called on them.
RUNS = {
    "gtp": [("gtp-u-tls.pcap", "tcp_data"), ("gtp-u-http-outer-frag.pcap", "tcp_data")],
    "pptp": [("pptp-gre-ppp-udp-dns.pcap", "udp_data"), ("gre-ppp-ipfrag-crafted.pcap", None)],
    "quic": [
        ("quic-v1-chromium.pcap", "tls_hello"),
        ("quic-handshake-null-ipv6.pcap", "tls_hello6"),
    ],
    "tcp_tls": [("mixed-android-mobile.pcap", "tls_hello"), ("ipv6-http-gquic.pcap", "tls_hello6")],
    "sctp": [("sctp-http.pcap", "sctp_data"), ("sctp-m3ua.pcap", "sctp_data")],
}


@functools.cache
def _compilation(stack: str) -> Compilation:
    """A stock stack generated once per module (at -O2 generating takes longer than compiling
    from the build cache): the plain and the sanitized builds and every capture share it."""
    return Compilation(REPO / "specs" / "stacks" / f"{stack}.yaml")


@functools.cache
def _asan_binary(stack: str) -> Path:
    # build/STACK, -O2: the binary tests/opt/test_differential.py compares (one cache key)
    return build_compilation(_compilation(stack), REPO / "build" / stack, sanitize=True,
                             quiet=True).binary  # fmt: skip


def _frames(pcap: Path) -> int:
    """Records in a classic pcap, from their headers."""
    import struct

    raw = pcap.read_bytes()
    order = "<" if raw[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    n, off = 0, 24
    while off + 16 <= len(raw):
        off += 16 + struct.unpack_from(order + "I", raw, off + 8)[0]
        n += 1
    return n


@pytest.mark.parametrize("stack", STACKS)
def test_stack_compiles_warning_free(stack: str, tmp_path: Path) -> None:
    res = build_compilation(_compilation(stack), tmp_path, quiet=True)
    assert res.binary.is_file()
    assert "-Werror" in res.command and "-Wextra" in res.command and "-O2" in res.command


@pytest.mark.parametrize(
    "stack,capture,handler",
    [(s, c, h) for s, runs in RUNS.items() for c, h in runs],
    ids=lambda x: str(x),
)
def test_stack_runs_under_sanitizers(
    stack: str, capture: str, handler: str | None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pcap = TRACES / capture
    if not pcap.is_file():
        pytest.skip(f"{capture} is not in {TRACES}")
    out = tmp_path_factory.mktemp(f"{stack}-asan")
    binary = _asan_binary(stack)
    r = subprocess.run(
        [str(binary), str(pcap), "--nf", "events", "--out", str(out), "--summary", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr[-3000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    # every frame of the capture was read and given to the stack (counted from the pcap record
    # headers here, independently of the reader)
    assert summary["packets"] == _frames(pcap) and summary["skipped"] == 0, summary
    if handler is not None:
        calls = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
        assert any(c.get("handler") == handler for c in calls), {c.get("handler") for c in calls}
