"""`rubikgen test`: the stock test vectors pass, and a broken expectation, an unknown key or
a bad packet field is reported at its file:line:col with exit status 1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.cli import main

REPO = REPO_ROOT
BUILD = REPO / "build" / "spectest"  # shared with `rubikgen test specs/`: stacks built once
STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"

CASE = f"""spec: {STACK}
test: a broken copy of a stock vector
cases:
  - name: handshake and data
    packets:
      - {{ipv4: {{src: 10.0.0.1, dst: 10.0.0.2}}, tcp: {{sport: 40000, dport: 80, flags: S, seq: 1000}}}}
      - {{ipv4: {{src: 10.0.0.2, dst: 10.0.0.1}}, tcp: {{sport: 80, dport: 40000, flags: SA, seq: 5000, ack: 1001}}}}
      - {{ipv4: {{src: 10.0.0.1, dst: 10.0.0.2}}, tcp: {{sport: 40000, dport: 80, flags: PA, seq: 1001, ack: 5001}}, payload: "hello"}}
      - {{ipv4: {{src: 10.0.0.2, dst: 10.0.0.1}}, tcp: {{sport: 80, dport: 40000, flags: PA, seq: 5001, ack: 1006}}, payload: "world!"}}
    expect:
      calls:
        - {{handler: tcp_data, dir: c2s, args: {{data: "hello", sport: 40000}}}}
        - {{handler: tcp_data, dir: s2c, args: {{data: "world!", sport: 80}}}}
      streams:
        - {{layer: tcp, dir: c2s, sport: 40000, data: "hello", close: flushed}}
        - {{layer: tcp, dir: s2c, sport: 80, data: "world!"}}
      flows:
        - {{layer: tcp, sport: 40000, close: flushed, packets: [2, 2]}}
"""


def _run(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, Path]:
    f = tmp_path / "case.test.yaml"
    f.write_text(text, encoding="utf-8")
    rc = main(["test", str(f), "--build-dir", str(BUILD)])
    return rc, capsys.readouterr().out, f


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_stock_vectors_pass(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["test", str(REPO / "specs"), "--build-dir", str(BUILD)])
    out = capsys.readouterr().out
    assert rc == 0, out
    m = re.search(r"(\d+) test file\(s\), (\d+) case\(s\), 0 failed", out)
    assert m and int(m.group(1)) >= 5 and int(m.group(2)) >= 18, out


def test_the_unbroken_case_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(tmp_path, CASE, capsys)
    assert rc == 0, out


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'data: "hello", sport',
            'data: "hellO", sport',
            "data is 'hello' (5 bytes), expected 'hellO'",
        ),
        ("sport: 80}}\n", "sport: 81}}\n", "sport is 80, expected 81"),
        (
            'sport: 40000, data: "hello"',
            'sport: 40000, data: "help"',
            "delivered 'hello' (5 bytes), expected 'help' (4 bytes)",
        ),
        (
            "close: flushed, packets",
            "close: accept, packets",
            "close is 'flushed', expected 'accept'",
        ),
        ("packets: [2, 2]", "packets: [2, 1]", "packets is [2, 2], expected [2, 1]"),
    ],
)
def test_a_broken_expectation_is_reported_where_it_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, message: str
) -> None:
    assert old in CASE
    text = CASE.replace(old, new, 1)
    rc, out, f = _run(tmp_path, text, capsys)
    assert rc == 1, out
    line = _line_of(text, new.strip())
    assert re.search(
        rf"^{re.escape(str(f))}:{line}:\d+: error: .*{re.escape(message)}", out, re.M
    ), out


def test_calls_and_streams_missing_from_the_expectations_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = CASE.replace(
        '        - {handler: tcp_data, dir: s2c, args: {data: "world!", sport: 80}}\n', ""
    )
    text = text.replace('        - {layer: tcp, dir: s2c, sport: 80, data: "world!"}\n', "")
    rc, out, f = _run(tmp_path, text, capsys)
    assert rc == 1
    assert f"{f}:{_line_of(text, 'calls:')}:" in out and "1 more call(s)" in out, out
    assert f"{f}:{_line_of(text, 'streams:')}:" in out and "unexpected stream" in out, out


def test_unknown_keys_and_packet_fields_are_positioned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = CASE.replace("    expect:", "    expct:")
    rc, out, f = _run(tmp_path, text, capsys)
    assert rc == 1
    assert f"{f}:{_line_of(text, 'expct:')}:5: error[RG005]: unknown key 'expct'" in out, out
    text = CASE.replace("flags: S,", "flgs: S,")
    rc, out, f = _run(tmp_path, text, capsys)
    assert rc == 1
    col = text.splitlines()[_line_of(text, "flgs") - 1].index("flgs") + 1
    assert f"{f}:{_line_of(text, 'flgs')}:{col}: error: tcp (TCP) has no field 'flgs'" in out, out
    assert "did you mean 'flags'?" in out


def test_packets_from_a_capture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`pcap:` sends a capture's frames: the same packets written by scapy give the same
    results as their description."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    c, s = {"src": "10.0.0.1", "dst": "10.0.0.2"}, {"src": "10.0.0.2", "dst": "10.0.0.1"}
    frames = [
        Ether() / IP(**c) / TCP(sport=40000, dport=80, flags="S", seq=1000),
        Ether() / IP(**s) / TCP(sport=80, dport=40000, flags="SA", seq=5000, ack=1001),
        Ether() / IP(**c) / TCP(sport=40000, dport=80, flags="PA", seq=1001, ack=5001) / b"hello",
        Ether() / IP(**s) / TCP(sport=80, dport=40000, flags="PA", seq=5001, ack=1006) / b"world!",
    ]
    for i, f in enumerate(frames):
        f.time = 1 + i / 1000
    wrpcap(str(tmp_path / "four.pcap"), frames)
    head, _, rest = CASE.partition("    packets:\n")
    text = (
        head
        + "    packets:\n      - {pcap: four.pcap}\n    expect:"
        + rest.split("    expect:", 1)[1]
    )
    rc, out, _ = _run(tmp_path, text, capsys)
    assert rc == 0, out


def test_not_a_test_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, f = _run(tmp_path, "- 1\n- 2\n", capsys)
    assert rc == 1 and f"{f}:1:1: error[RG006]: expected a mapping at the top level" in out, out
    assert main(["test", str(tmp_path / "missing")]) == 2


def test_a_stack_argument_runs_its_test_files(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["test", str(REPO / "specs" / "stacks" / "sctp.yaml"), "--build-dir", str(BUILD)])
    out = capsys.readouterr().out
    assert rc == 0 and "1 test file(s), 2 case(s), 0 failed" in out, out
