"""User-defined events (stack `events:`, docs/spec-language.md section 3): the validator's
errors with their positions, and the stock tcp_tls_http stack's `http_request` event on real
captures against tshark's HTTP dissector.

The end-to-end check: on every capture of `oracle.ELIGIBLE` (every TCP stream on a path the
stack parses), the set of (client address, port, server address, port, method, URI) of the
`http_req`/`http_req6` calls (the handlers hooked on the UDE) equals the set tshark reports for
its `http.request` frames (`http.request.method`, `http.request.uri`). The stack's side is read
from the request line at the start of the call's `data` (the events NF shows its first 64
bytes: a URI cut there must be a prefix of tshark's). EXCLUDED lists the captures where tshark
and the stack see different bytes, with the reason.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.captures import REPO
from support.oracle import ELIGIBLE, TRACES, tshark_available
from support.oracle.tshark import _tshark
from support.ude import EXCLUDED, STACK

TCP_IP = REPO / "specs" / "stacks" / "tcp_ip.yaml"


# -- the validator ------------------------------------------------------------------------------


def _validate(tmp_path: Path, body: str) -> str:
    spec = tmp_path / "ude.yaml"
    spec.write_text(f"stack: ude\nextends: {TCP_IP}\n{body}")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run(
        [sys.executable, "-m", "rubikgen", "validate", str(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert p.returncode != 0, p.stdout + p.stderr
    return p.stdout + p.stderr


BAD_EVENTS = """\
events:
  a1: {on: tcp.asn}
  a2: {on: tcpx.asm}
  a3: {on: tcp.timeout}
  c1: {on: tcp.c2}
  c2: {on: tcp.c1}
  t1: {on: tcp.asm, when: "sdu == 3"}
  t2: {on: tcp.asm, when: "header.sprt == 1"}
  t3: {on: tcp.asm, when: "sdu[:2] == 'G\\\\q'"}
  d: {on: tcp}
  asm: {on: tcp.rexmit}
  ok: {on: tcp.asm, before: [nope]}
  v1: {on: udp.udp_data, when: "v.header.sport == 1"}
handlers:
  h1: {layer: udp, with: ok}
"""


def test_validator_errors_with_positions(tmp_path: Path) -> None:
    out = _validate(tmp_path, BAD_EVENTS)
    f = str(tmp_path / "ude.yaml")
    expected = [
        (4, 12, "RG041", "layer 'tcp' has no event 'asn'", "did you mean 'asm'?"),
        (5, 12, "RG052", "unknown layer 'tcpx'", "did you mean 'tcp'?"),
        (6, 12, "RG043", "event 'a3' cannot filter 'timeout'", None),
        (9, 28, "RG012", "cannot compare a byte slice with a number", None),
        (10, 28, "RG011", "unknown name 'header.sprt'", "did you mean 'header.sport'?"),
        (11, 41, "RG010", "unknown escape '\\q' in a string literal", None),
        (12, 11, "RG041", "'on: tcp' does not name a layer's event", "write LAYER.EVENT"),
        (13, 3, "RG022", "event 'asm' has the name of an event of protocol 'tcp'", None),
        (14, 30, "RG041", "layer 'tcp' has no event 'nope'", None),
        (15, 33, "RG035", "virtual reference needs a sequence, but layer 'udp'", None),
        (17, 26, "RG060", "event 'ok' runs on layer 'tcp', not on 'udp'", "on layer 'tcp'"),
    ]
    for line, col, code, msg, hint in expected:
        head = f"{f}:{line}:{col}: error[{code}]: {msg}"
        assert head in out, f"missing {head!r} in:\n{out}"
        if hint is not None:
            after = out[out.index(head) :].split("\n/", 1)[0]
            assert hint in after, f"{hint!r} not in {after!r}"
    # the cycle, once, at the relation that closes it (c1's or c2's `on`)
    cyc = re.findall(
        rf"{re.escape(f)}:([78]):12: error\[RG040\]: event order is cyclic: (c1|c2) ", out
    )
    assert len(cyc) == 1, out
    assert f"{len(expected) + 1} error(s)" in out, out


def test_udes_in_extended_stack_validate(tmp_path: Path) -> None:
    """A UDE on another UDE, ordered before a handler, removed with `remove: events`."""
    spec = tmp_path / "ok.yaml"
    spec.write_text(
        f"stack: ok\nextends: {STACK}\n"
        "events:\n"
        "  http_get: {on: tcp.http_request, when: \"sdu[:4] == 'GET '\", before: [tcp_data]}\n"
        "handlers:\n"
        "  get: {layer: tcp, with: http_get, args: {data: sdu}}\n"
        "remove: {events: [http_request6], handlers: [http_req6]}\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run(
        [sys.executable, "-m", "rubikgen", "validate", "--strict", str(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr


# -- end to end -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built() -> Any:
    if not tshark_available():
        pytest.skip("tshark not installed")
    from rubikgen.toolchain.build import build

    return build(STACK, REPO / "build" / "tcp_tls_http", quiet=True)


def _addr(v: dict[str, Any]) -> str:
    return str(ipaddress.ip_address(bytes.fromhex(v["hex"])))


Request = tuple[str, int, str, int, str, str]


def _stack_requests(binary: Path, pcap: Path, out: Path) -> list[tuple[Request, bool]]:
    """(request, whether the URI may be cut by the 64 bytes the events NF shows)."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [str(binary), str(pcap), "--nf", "events", "--out", str(out)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    got = []
    for line in (out / "events.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("handler") not in ("http_req", "http_req6"):
            continue
        a = r["args"]
        head = bytes.fromhex(a["data"]["hex"])
        first = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, _, rest = first.partition(" ")
        uri = rest.split(" ", 1)[0]
        cut = b"\r\n" not in head and a["data"]["len"] > len(head)
        got.append(
            ((_addr(a["saddr"]), a["sport"], _addr(a["daddr"]), a["dport"], method, uri), cut)
        )
    return got


def _tshark_requests(pcap: Path) -> set[Request]:
    fields = ["ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst", "tcp.dstport"]
    fields += ["http.request.method", "http.request.uri"]
    args = ["-r", str(pcap), "-Y", "http.request", "-T", "fields", "-E", "separator=\t"]
    text = _tshark([*args, *[x for f in fields for x in ("-e", f)]])
    out = set()
    for line in text.splitlines():
        f = line.split("\t")
        if len(f) < 8 or not f[2]:
            continue
        # one request per frame here; several (pipelined) would come comma-separated
        assert "," not in f[6], f"pipelined requests in one frame: {line!r}"
        out.add((f[0] or f[1], int(f[2]), f[3] or f[4], int(f[5]), f[6], f[7]))
    return out


CAPTURES = [n for n in sorted(ELIGIBLE) if n not in EXCLUDED]


@pytest.mark.parametrize("name", CAPTURES)
def test_http_request_ude_matches_tshark(built: Any, name: str, tmp_path: Path) -> None:
    pcap = TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{pcap} missing")
    got = _stack_requests(built.binary, pcap, tmp_path)
    ref = _tshark_requests(pcap)
    exact = {r for r, cut in got if not cut}
    cut = [r for r, c in got if c]
    matched_cut = set()
    for r in cut:  # a URI cut at 64 bytes: a prefix of tshark's for the same flow and method
        m = [x for x in ref if x[:5] == r[:5] and x[5].startswith(r[5])]
        assert m, f"{name}: no tshark request for {r}"
        matched_cut.update(m)
    assert exact | matched_cut == ref, (
        f"{name}: stack only {sorted(exact - ref)}, tshark only {sorted(ref - exact - matched_cut)}"
    )


def test_generated_code_names_the_ude(built: Any) -> None:
    """The UDE's test sits in the layer's event order with a comment naming its spec line, and
    the hooked handler's descriptor carries the event (rg_handler_desc.events)."""
    lines = STACK.read_text().splitlines()
    line = next(i + 1 for i, s in enumerate(lines) if s.startswith("  http_request:"))
    gen = (built.binary.parent / "tcp_tls_http_gen.c").read_text()
    assert re.search(rf"tcp_tls_http\.yaml:{line} event http_request \(on: tcp\.asm\)", gen)
    assert '{"http_req", ' in gen and '"http_request"},' in gen
    # the filter costs what a `when` does: one test of the sdu's first bytes, no call
    assert 'rg_bytes_make((const uint8_t *)"GET\\040", 4)' in gen
