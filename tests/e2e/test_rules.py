"""Rules files (docs/rules.md): diagnostics at file:line:col, `rubikgen validate`, the JSON
Schema, and rule sets compiled into the TCP/IP stack, run on real captures and compared with
tshark: the rule each frame falls under is computed here, independently, from the fields
tshark decodes, and the stack's per-rule hits must agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from support.captures import REPO
from support.oracle import TRACES, tshark_available
from support.oracle.tshark import _tshark
from support.rules import (
    CAPTURES,
    DROP_CAPTURES,
    DROP_FILTER,
    DROPS,
    FIELDS,
    PREDICATES,
    RULES,
    Frame,
    _num,
    _tcp,
    _udp,
    _voip_capture,
    expected_rule,
    pcap_frames,
    run_json,
    tshark_frames,
    tshark_numbers,
)

STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"
ENV = dict(os.environ, PYTHONPATH=str(REPO))


def rubikgen(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rubikgen", *args], capture_output=True, text=True, env=ENV,
        cwd=cwd, timeout=600,
    )  # fmt: skip


# -- diagnostics --------------------------------------------------------------------------------

BAD = """\
spec: {stack}
rules:
  - {{name: a, match: "tcp.dprt == 80", action: drop}}
  - name: b
    match: "tcpp.header.dport == 80 && ip.saddr == 10.0.0.1/8"
    action: {{rewrite: {{tcp.dport: 70000, ip.ttl: "x"}}}}
  - {{name: a, match: "udp.dport == ", action: drop}}
  - {{name: c, match: "ipv6.saddr == 1", action: pass}}
  - {{name: d, match: "tcp.sport + 1 == 10.0.0.0/8", action: count}}
  - {{name: e, match: "len(tcp.dport) == 1", action: count}}
  - {{name: f, match: "tcp", action: {{rewrite: {{tcp.mss: 1400}}}}}}
"""

EXPECTED = [
    ("3:23", "RG011", "layer 'tcp' (tcp) has no header field 'dprt'", "did you mean 'dport'"),
    ("5:13", "RG011", "unknown layer 'tcpp' in stack tcp_ip", "did you mean 'tcp'"),
    ("5:52", "RG015", "'10.0.0.1/8' has bits set after the /8 prefix", "network address"),
    ("6:35", "RG015", "70000 does not fit 'tcp.dport' (16 bits)", "at most 65535"),
    ("6:50", "RG012", "'x' is not a value for 'ip.ttl' (8 bits)", "dotted IPv4"),
    ("7:12", "RG022", "two rules named 'a'", "the first is rule 1"),
    ("7:36", "RG010", "expected an expression after '=='", None),
    ("8:23", "RG012", "'ipv6.saddr' is a 16-byte field", "IPv6 addresses"),
    ("9:40", "RG012", "a prefix (a.b.c.d/n) is only compared", "ip.saddr == 10.0.0.0/8"),
    ("10:23", "RG017", "rules take numbers, fields, operators", None),
    ("11:57", "RG012", "'tcp.mss' cannot be rewritten", "fixed offset"),
]


def test_rules_errors_are_positioned_with_hints(tmp_path: Path) -> None:
    f = tmp_path / "bad.rules.yaml"
    f.write_text(BAD.format(stack=STACK), encoding="utf-8")
    proc = rubikgen("validate", "--format", "json", str(f))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    got = json.loads(proc.stdout)
    diags = got["diagnostics"] if isinstance(got, dict) else got
    where = {(f"{d['line']}:{d['col']}", d["code"]): d for d in diags}
    for pos, code, msg, hint in EXPECTED:
        d = where.get((pos, code))
        assert d is not None, (pos, code, sorted(where))
        assert msg in d["message"], d
        if hint:
            assert hint in (d.get("hint") or ""), d
    assert len(diags) == len(EXPECTED), diags
    # text rendering: file:line:col: error[...]
    text = rubikgen("validate", str(f)).stdout
    assert f"{f}:3:23: error[RG011]" in text


def test_rules_schema_errors_and_bad_build(tmp_path: Path) -> None:
    f = tmp_path / "r.yaml"
    f.write_text(
        'rules:\n  - {name: x, match: "tcp.dport == 1", action: dropp, colour: red}\n',
        encoding="utf-8",
    )
    proc = rubikgen("validate", str(f))
    assert proc.returncode == 1
    assert f"{f}:2:48: error[RG006]" in proc.stdout and "did you mean 'drop'" in proc.stdout
    assert f"{f}:2:55: error[RG005]" in proc.stdout  # unknown key
    # build --rules reports the rules' errors like spec errors, and builds nothing
    g = tmp_path / "g.yaml"
    g.write_text('rules:\n  - {name: x, match: "tcp.dportt == 1", action: drop}\n')
    proc = rubikgen("build", str(STACK), "--rules", str(g), "-o", str(tmp_path / "b"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{g}:2:23: error[RG011]" in proc.stderr and "did you mean 'dport'" in proc.stderr
    assert not (tmp_path / "b" / "tcp_ip").exists()


def test_rules_schema_is_fresh_and_accepts_the_docs_example() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from rubikgen.front.source import load_yaml

    schema = json.loads((REPO / "schema" / "rules.schema.json").read_text())
    ex = REPO / "docs" / "examples" / "middlebox.rules.yaml"
    jsonschema.validate(load_yaml(str(ex), ex.read_text()).data, schema)
    bad = {"rules": [{"name": "x", "match": "1", "action": "explode"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    proc = rubikgen("validate", "--strict", str(ex))
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- compiled rules against tshark --------------------------------------------------------------


@pytest.fixture(scope="module")
def counting_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("rules-count")
    r = d / "count.rules.yaml"
    r.write_text(RULES.format(stack=STACK), encoding="utf-8")
    proc = rubikgen("build", str(STACK), "--rules", str(r), "-o", str(d / "b"))
    assert proc.returncode == 0, proc.stderr
    return d / "b" / "tcp_ip"


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
@pytest.mark.parametrize("name", CAPTURES)
def test_rule_hits_match_tshark(name: str, counting_binary: Path) -> None:
    pcap = TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{name} is not in {TRACES}")
    want = Counter(expected_rule(f) for f in tshark_frames(pcap))
    got = run_json(counting_binary, pcap)
    hits = {r["name"]: r["hits"] for r in got["rules"]}  # type: ignore[attr-defined]
    assert list(hits) == [n for n, _ in PREDICATES]
    assert hits == {n: want.get(n, 0) for n, _ in PREDICATES}, (hits, want)
    assert sum(hits.values()) > 0
    bench = subprocess.run(
        [str(counting_binary), str(pcap), "--bench", "--passes", "1", "--nf", "count"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    line = json.loads(bench.stdout.strip().splitlines()[-1])
    assert line["rules"] == got["rules"]  # the --bench JSON carries the same counters


# -- verdicts: drop, drop-flow, stateful, through --write ---------------------------------------


@pytest.fixture(scope="module")
def dropping_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("rules-drop")
    r = d / "drop.rules.yaml"
    r.write_text(DROPS.format(), encoding="utf-8")
    proc = rubikgen("build", str(STACK), "--rules", str(r), "-o", str(d / "b"))
    assert proc.returncode == 0, proc.stderr
    return d / "b" / "tcp_ip"


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
@pytest.mark.parametrize("name", DROP_CAPTURES)
def test_drop_rules_remove_exactly_tsharks_frames(
    name: str, dropping_binary: Path, tmp_path: Path
) -> None:
    pcap = TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{name} is not in {TRACES}")
    out = tmp_path / "out.pcap"
    got = run_json(dropping_binary, pcap, "--write", str(out))
    drop = tshark_numbers(pcap, DROP_FILTER)
    assert drop, "the capture has nothing to drop: the test would prove nothing"
    frames_in = pcap_frames(pcap)
    want = [f for i, f in enumerate(frames_in, 1) if i not in drop]
    assert pcap_frames(out) == want  # every other frame, byte for byte, in order
    hits = {r["name"]: r["hits"] for r in got["rules"]}  # type: ignore[attr-defined]
    assert sum(hits[n] for n in ("google-https", "dns-query", "upload-replies", "v6")) == len(drop)
    assert hits["keep"] == len(want) and hits["syn-flows"] == 0  # `true` takes the rest


STATEFUL = """\
rules:
  - {name: to-google, stateful: true, action: drop,
     match: "tcp.syn && !tcp.ack && ip.daddr == 172.217.21.202"}
  - {name: uploads, stateful: true, action: drop, match: "tcp.syn && !tcp.ack && tcp.dport == 8080"}
"""
STATEFUL_SYNS = (
    "tcp.flags.syn == 1 && tcp.flags.ack == 0 && !ipv6"
    " && (ip.dst == 172.217.21.202 || tcp.dstport == 8080)"
)


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
@pytest.mark.parametrize("name", DROP_CAPTURES)
def test_stateful_rules_drop_whole_connections_both_ways(name: str, tmp_path: Path) -> None:
    """The SYN decides; every later packet of the connection, replies included, gets the
    same verdict (tshark's tcp.stream gives the connection's frames)."""
    pcap = TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{name} is not in {TRACES}")
    r = tmp_path / "stateful.rules.yaml"
    r.write_text(STATEFUL, encoding="utf-8")
    proc = rubikgen("build", str(STACK), "--rules", str(r), "-o", str(tmp_path / "b"))
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out.pcap"
    got = run_json(tmp_path / "b" / "tcp_ip", pcap, "--write", str(out))
    syns = _tshark(["-r", str(pcap), "-Y", STATEFUL_SYNS, "-T", "fields", "-e", "tcp.stream"])
    streams = sorted({int(x) for x in syns.split()})
    assert streams, "no connection to drop: the test would prove nothing"
    drop = tshark_numbers(pcap, " || ".join(f"tcp.stream == {s}" for s in streams))
    want = [f for i, f in enumerate(pcap_frames(pcap), 1) if i not in drop]
    assert pcap_frames(out) == want
    hits = {x["name"]: x["hits"] for x in got["rules"]}  # type: ignore[attr-defined]
    assert sum(hits.values()) == len(drop)


@pytest.mark.parametrize("mode", ["compiled-in", "reloadable"])
def test_sanitized_rules_survive_hostile_captures(mode: str, tmp_path: Path) -> None:
    """ASan + UBSan: every kind of rule (exact groups, ranges, prefixes, IPv6 prefixes, bad
    checksums, stateful lingering instances, drops, rewrites through the setters) on truncated,
    malformed and crafted captures; compiled in and as a reloadable set (`--rules-reload`)."""
    r = tmp_path / "all.rules.yaml"
    more = [x.splitlines()[1:] for x in (STATEFUL, REWRITES, STATEFUL_REWRITE)]  # no `rules:`
    more.append(['  - {name: v6-net, match: "ipv6.saddr == 2001:db8::/32", action: drop}',
                 '  - {name: bad, match: "tcp.checksum_bad || ip.checksum_bad", action: drop}'])  # fmt: skip
    r.write_text(RULES.format(stack=STACK) + "\n".join(sum(more, [])) + "\n", encoding="utf-8")
    extra = ["--rules-reload"] if mode == "reloadable" else []
    proc = rubikgen(
        "build", str(STACK), "--rules", str(r), "-o", str(tmp_path / "b"), "--sanitize", *extra
    )
    assert proc.returncode == 0, proc.stderr
    binary = tmp_path / "b" / "tcp_ip-asan"
    names = ["udp-bad-length-truncated.pcap", "ipv4-frag-tcp-overlap-ooo-crafted.pcap",
             "tcp-rst-with-data-crafted.pcap", "http-post-upload.pcap"]  # fmt: skip
    ran = 0
    for name in names:
        pcap = TRACES / name
        if not pcap.is_file():
            continue
        p = subprocess.run(
            [str(binary), str(pcap), "--nf", "count", "--write", str(tmp_path / "o.pcap")],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert p.returncode == 0 and "runtime error" not in p.stderr, (name, p.stderr[-2000:])
        ran += 1
    if not ran:
        pytest.skip(f"no capture of {names} in {TRACES}")


# -- rewrite: new values, checksums verifying, every other byte unchanged -------------------------

REWRITES = """\
rules:
  - {name: to-80, match: "tcp.dport == 8080", action: {rewrite: {tcp.dport: 80, ip.ttl: 33, ip.dscp: 46}}}
  - {name: from-80, match: "tcp.sport == 8080", action: {rewrite: {tcp.sport: 80}}}
  - {name: dns-src, match: "udp.dport == 53", action: {rewrite: {ip.saddr: 10.1.2.3, udp.sport: 5353}}}
  - {name: push-off, match: "tcp.dport == 443 && tcp.psh", action: {rewrite: {tcp.psh: 0, tcp.window: 1000}}}
"""
# field -> (layer, byte offset in its header, width in bits, bit shift) of an independent parse
_FIELDS = {
    "ip.ttl": ("ip", 8, 8, 0), "ip.dscp": ("ip", 1, 6, 2), "ip.saddr": ("ip", 12, 32, 0),
    "tcp.sport": ("tcp", 0, 16, 0), "tcp.dport": ("tcp", 2, 16, 0),
    "tcp.window": ("tcp", 14, 16, 0), "tcp.psh": ("tcp", 13, 1, 3),
    "udp.sport": ("udp", 0, 16, 0),
}  # fmt: skip
_CSUM = {"ip": 10, "tcp": 16, "udp": 6}


def _layers(frame: bytes) -> dict[str, int] | None:
    """Ethernet/IPv4/TCP or UDP: the offset of each header (an independent parse)."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[14] >> 4 != 4:
        return None
    ihl = (frame[14] & 15) * 4
    proto = {6: "tcp", 17: "udp"}.get(frame[23])
    frag = int.from_bytes(frame[20:22], "big") & 0x3FFF
    if proto is None or frag:
        return {"ip": 14}
    return {"ip": 14, proto: 14 + ihl}


def _rewrite_of(f: Frame) -> dict[str, int]:
    """What the rules do to a frame, from tshark's fields of the input (first match wins)."""
    if _tcp(f) and _num(f, "tcp.dstport") == 8080:
        return {"tcp.dport": 80, "ip.ttl": 33, "ip.dscp": 46}
    if _tcp(f) and _num(f, "tcp.srcport") == 8080:
        return {"tcp.sport": 80}
    if _udp(f) and _num(f, "udp.dstport") == 53:
        return {"ip.saddr": 0x0A010203, "udp.sport": 5353}
    if _tcp(f) and _num(f, "tcp.dstport") == 443 and f["tcp.flags.push"] in ("1", "True"):
        return {"tcp.psh": 0, "tcp.window": 1000}
    return {}


def _get(frame: bytes, off: int, width: int, shift: int) -> int:
    n = (width + shift + 7) // 8
    return (int.from_bytes(frame[off : off + n], "big") >> shift) & ((1 << width) - 1)


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
@pytest.mark.parametrize("name", DROP_CAPTURES)
def test_rewrites_verify_with_tshark(name: str, tmp_path: Path) -> None:
    check_rewrites(name, REWRITES, _rewrite_of, tmp_path)


STATEFUL_REWRITE = """\
rules:
  - {name: web, stateful: true, match: "tcp.dport == 8080", action: {rewrite: {tcp.dport: 9090}}}
"""


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
def test_stateful_rewrite_moves_the_port_both_ways(tmp_path: Path) -> None:
    """Requests get dport 9090, and the replies of the same connection sport 9090."""

    def rewrite_of(f: Frame) -> dict[str, int]:
        if _tcp(f) and _num(f, "tcp.dstport") == 8080:
            return {"tcp.dport": 9090}
        if _tcp(f) and _num(f, "tcp.srcport") == 8080:
            return {"tcp.sport": 9090}
        return {}

    check_rewrites("http-post-upload.pcap", STATEFUL_REWRITE, rewrite_of, tmp_path)


def check_rewrites(
    name: str | Path,
    rules: str,
    rewrite_of: Callable[[Frame], dict[str, int] | None],
    tmp_path: Path,
) -> None:
    """The rules' rewrites on a capture: the new values where rewrite_of says (None: the frame
    is dropped), every checksum tshark verified on the input verifies on the output, every
    other byte unchanged."""
    pcap = name if isinstance(name, Path) else TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{name} is not in {TRACES}")
    r = tmp_path / "rewrite.rules.yaml"
    r.write_text(rules, encoding="utf-8")
    proc = rubikgen("build", str(STACK), "--rules", str(r), "-o", str(tmp_path / "b"))
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out.pcap"
    got = run_json(tmp_path / "b" / "tcp_ip", pcap, "--write", str(out))
    fields = FIELDS + ["tcp.flags.push", "tcp.stream"]
    args = ["-r", str(pcap), "-T", "fields", "-E", "occurrence=f"] + [
        a for k in fields for a in ("-e", k)
    ]
    rows = [dict(zip(fields, ln.split("\t"), strict=False)) for ln in _tshark(args).splitlines()]
    for row in rows:
        row["protos"] = row["frame.protocols"].split(":")  # type: ignore[assignment]
    frames_in, frames_out = pcap_frames(pcap), pcap_frames(out)
    checks = ["-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
              "-o", "udp.check_checksum:TRUE"]  # fmt: skip
    status_args = ["-T", "fields", "-e", "ip.checksum.status", "-e", "tcp.checksum.status",
                   "-e", "udp.checksum.status", "-E", "occurrence=f"]  # fmt: skip
    st_in = _tshark(["-r", str(pcap), *checks, *status_args]).splitlines()
    st_out = _tshark(["-r", str(out), *checks, *status_args]).splitlines()
    wants = [rewrite_of(row) for row in rows]
    kept = [i for i, w in enumerate(wants) if w is not None]
    assert len(frames_out) == len(kept)  # exactly the dropped frames are missing
    rewritten = 0
    for k, i in enumerate(kept):
        (ts_a, a), (ts_b, b), want = frames_in[i], frames_out[k], wants[i]
        assert ts_a == ts_b and len(a) == len(b) and want is not None
        offs = _layers(a)
        allowed: set[int] = set()
        for fname, value in want.items():
            assert offs is not None
            lay, off, width, shift = _FIELDS[fname]
            at = offs[lay] + off
            assert _get(b, at, width, shift) == value, (i + 1, fname)
            nb = (width + shift + 7) // 8
            mask = ((1 << width) - 1) << shift  # bits beside the field (ECN by DSCP) unchanged
            old, new = (int.from_bytes(x[at : at + nb], "big") for x in (a, b))
            assert (old ^ new) & ~mask == 0, (i + 1, fname)
            allowed |= set(range(at, at + nb))
        if want:
            rewritten += 1
            assert offs is not None
            for lay, at in offs.items():  # the checksums covering the fields may change
                allowed |= {at + _CSUM[lay], at + _CSUM[lay] + 1}
            # every checksum tshark verified on the input verifies on the output
            for x, y in zip(st_in[i].split("\t"), st_out[k].split("\t"), strict=False):
                assert x != "1" or y == "1", (i + 1, st_in[i], st_out[i])
        changed = {k for k in range(len(a)) if a[k] != b[k]}
        assert changed <= allowed, (i + 1, sorted(changed - allowed))
    assert rewritten > 0
    hits = {x["name"]: x["hits"] for x in got["rules"]}  # type: ignore[attr-defined]
    assert sum(hits.values()) == rewritten + len(wants) - len(kept)


# -- the README's middlebox ----------------------------------------------------------------------


def _middlebox(rows_seen: set[str]) -> Callable[[Frame], dict[str, int] | None]:
    """What the README's rules do to a frame, from tshark's fields (in frame order)."""

    def of(f: Frame) -> dict[str, int] | None:
        sp, dp = _num(f, "tcp.srcport"), _num(f, "tcp.dstport")
        if _tcp(f) and 23 in (sp, dp):
            return None
        if _tcp(f) and dp == 80:
            rows_seen.add(f["tcp.stream"])
        if _tcp(f) and f["tcp.stream"] in rows_seen:  # the connection the rule took
            return {"tcp.dport": 8080} if dp == 80 else {"tcp.sport": 8080} if sp == 80 else {}
        usp, udp_ = _num(f, "udp.srcport"), _num(f, "udp.dstport")
        if _udp(f) and (5060 in (usp, udp_) or 16384 <= (udp_ or 0) <= 32767):
            return {"ip.dscp": 46}
        return {}

    return of


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
@pytest.mark.parametrize("name", ["crafted", "mixed-android-mobile.pcap"])
def test_readme_middlebox(name: str, tmp_path: Path) -> None:
    from support.readme_snippets import rules_example

    text = rules_example().replace("../../specs/stacks/tcp_ip.yaml", str(STACK))
    example = (REPO / "docs" / "examples" / "middlebox.rules.yaml").read_text(encoding="utf-8")
    assert rules_example() in example  # the example file is the README's block
    pcap: str | Path = name
    if name == "crafted":
        pcap = tmp_path / "voip.pcap"
        _voip_capture(pcap)
    check_rewrites(pcap, text, _middlebox(set()), tmp_path)


def test_rules_in_toml(tmp_path: Path) -> None:
    f = tmp_path / "r.toml"
    text = f"""spec = "{STACK}"

[[rules]]
name = "telnet"
match = "tcp.dport == 23 || tcp.sport == 23"
action = "drop"

[[rules]]
name = "web"
stateful = true
match = "tcp.dprt == 80"
action = {{rewrite = {{"tcp.dport" = 8080}}}}
"""
    f.write_text(text, encoding="utf-8")
    proc = rubikgen("validate", str(f))
    assert proc.returncode == 1
    assert f"{f}:11:10: error[RG011]" in proc.stdout and "did you mean 'dport'" in proc.stdout
    f.write_text(text.replace("dprt", "dport"), encoding="utf-8")
    proc = rubikgen("validate", "--strict", str(f))
    assert proc.returncode == 0, proc.stdout


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
def test_rule_hits_add_up_over_workers(counting_binary: Path) -> None:
    """--workers 2: every worker's context counts its packets; the summary adds them up."""
    pcap = TRACES / "mixed-android-mobile.pcap"
    if not pcap.is_file():
        pytest.skip(f"{pcap} not found")
    one = run_json(counting_binary, pcap)
    two = run_json(counting_binary, pcap, "--workers", "2")
    assert all(n > 0 for n in two["workers"])  # type: ignore[attr-defined]  # both had packets
    assert two["rules"] == one["rules"] and sum(r["hits"] for r in one["rules"]) > 0  # type: ignore[attr-defined]
