"""No silent empty output: frames of a link type the stack has no entry for are counted
(`skipped_linktype`), named in the summary with the stack's entries, and warned about once.

Real builds and real captures: the gtp stack with its entry spelled for Ethernet only, on the
Linux cooked capture of ../shared/traces (GTP-U as a mobile core records it); and tcp_ip without
its raw IPv6 entry on the bundled raw-IP capture, where tshark counts the IPv6 frames. And
`rubikgen run --nf streams` warns of a layer whose reassembled data nothing takes (the streams
NF records only the `data` arguments of handler calls).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import REPO_ROOT
from support.oracle import TRACES, tshark_available
from support.oracle.tshark import _tshark

from rubikgen.toolchain.build import build

ROOT = REPO_ROOT
SLL = TRACES / "sll-dns2tcp-tls.pcap"
RAW = ROOT / "captures" / "raw-ipv4-ipv6-http.pcap"


def _stack(tmp: Path, name: str, entry: str | None = None) -> Path:
    """A private copy of specs/ whose stack `name` has the entry line `entry` (if given)."""
    shutil.copytree(ROOT / "specs", tmp / "specs")
    path = tmp / "specs" / "stacks" / f"{name}.yaml"
    if entry is not None:
        text, n = re.subn(r"(?m)^entry:.*$", f"entry: {entry}", path.read_text())
        assert n == 1
        path.write_text(text)
    return path


def _run(binary: Path, capture: Path, fmt: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, capture, "--nf", "count", "--summary", fmt],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _need(capture: Path) -> None:
    if not capture.is_file():
        pytest.skip(f"{capture} is missing")
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")


def _tshark_count(capture: Path, display_filter: str) -> int:
    out = _tshark(["-r", str(capture), "-Y", display_filter, "-T", "fields", "-e", "frame.number"])
    return len(out.split())


def test_gtp_on_a_linux_cooked_capture_says_why_it_writes_nothing(tmp_path: Path) -> None:
    _need(SLL)
    binary = build(_stack(tmp_path, "gtp", "{ethernet: eth}"), tmp_path / "b", quiet=True).binary
    frames = _tshark_count(SLL, "sll")
    assert frames > 0
    proc = _run(binary, SLL, "json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["packets"] == frames and s["skipped_linktype"] == frames and s["skipped"] == frames
    assert s["link_type"] == "LINUX_SLL" and s["entries"] == ["ethernet"]
    assert s["flows"] == 0
    # one warning line, at the first such packet
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1, proc.stderr
    assert "packet 1:" in warnings[0] and "LINUX_SLL" in warnings[0]
    assert "its entries: ethernet" in warnings[0]
    text = _run(binary, SLL, "full").stdout
    line = f"skipped_linktype {frames}  (of skipped: capture link type LINUX_SLL; "
    assert line + "the stack's entries: ethernet)" in text, text


def test_raw_ip_frames_of_a_version_without_entry_are_counted(tmp_path: Path) -> None:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    entry = '{ethernet: eth, "null": loopback, raw_ipv4: ip, sll: sll, sll2: sll2}'
    binary = build(_stack(tmp_path, "tcp_ip", entry), tmp_path / "b", quiet=True).binary
    v6 = _tshark_count(RAW, "ipv6 && !ip")
    assert v6 > 0
    proc = _run(binary, RAW, "json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["skipped_linktype"] == v6 == s["skipped"]
    assert s["entries"] == ["ethernet", "null", "raw_ipv4", "sll", "sll2"]
    assert s["layers"]["ipv6"]["opened"] == 0 and s["layers"]["ip"]["opened"] > 0
    assert "IPv6 packets" in proc.stderr and proc.stderr.count("warning") == 1
    # with every entry nothing is skipped, and nothing is said
    full = build(ROOT / "specs" / "stacks" / "tcp_ip.yaml", tmp_path / "full", quiet=True).binary
    proc = _run(full, RAW, "json")
    assert json.loads(proc.stdout)["skipped_linktype"] == 0 and "warning" not in proc.stderr


@pytest.mark.parametrize("capture", [RAW, SLL], ids=["raw-ip", "sll"])
def test_a_single_ethernet_entry_is_not_parsed_from_other_link_types(
    tmp_path: Path, capture: Path
) -> None:
    """`entry: eth` (the only entry an Ethernet layer): raw-IP and Linux cooked frames used to
    be parsed as Ethernet, 0 flows and no word; now each is skipped, counted and warned about
    with the stack's entries named. The frames counted are tshark's."""
    _need(capture)
    binary = build(_stack(tmp_path, "tcp_ip", "eth"), tmp_path / "b", quiet=True).binary
    frames = _tshark_count(capture, "frame")
    proc = _run(binary, capture, "json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["entries"] == ["ethernet"]
    assert s["packets"] == s["skipped_linktype"] == frames > 0
    assert s["flows_opened"] == 0 and s["flows"] == 0
    assert proc.stderr.count("warning") == 1 and "its entries: ethernet" in proc.stderr
    # the short summary says it in words
    text = _run(binary, capture, "text").stdout
    assert f"skipped        {frames} frames of link type {s['link_type']}" in text, text
    assert "which the stack has no entry for (its entries: ethernet)" in text, text


def test_run_streams_warns_of_a_sequence_nothing_takes(tmp_path: Path, capfd) -> None:
    """tcp_ip without its tcp_data handler: the streams NF would record no IPv4 TCP flow. run
    says so, naming the layer where the stack declares it; the handler it suggests fixes it."""
    from rubikgen.cli import main

    stack = _stack(tmp_path, "tcp_ip")
    text = stack.read_text()
    tcp_data = next(line for line in text.splitlines() if line.startswith("  tcp_data:"))
    stack.write_text(text.replace(tcp_data + "\n", ""))
    layer_line = next(
        n for n, line in enumerate(stack.read_text().splitlines(), 1) if line.startswith("  tcp:")
    )
    args = ["run", str(stack), str(RAW), "--build-dir", str(tmp_path / "b")]
    assert main([*args, "--out", str(tmp_path / "o1"), "--nf", "streams"]) == 0
    err = capfd.readouterr().err
    warned = [line for line in err.splitlines() if "warning: layer 'tcp'" in line]
    assert len(warned) == 1 and f"tcp_ip.yaml:{layer_line}:3:" in warned[0], err
    assert "tcp6" not in err  # tcp6 keeps its handler
    flows = (tmp_path / "o1" / "flows.jsonl").read_text()
    assert '"layer":"tcp6"' in flows and '"layer":"tcp"' not in flows
    # other NFs record instances without handlers: no warning
    assert main([*args, "--out", str(tmp_path / "o2"), "--nf", "flowstats"]) == 0
    assert "warning" not in capfd.readouterr().err
    # the suggested handler: the tcp flows are recorded, and the warning is gone
    suggestion = re.search(r"`(tcp_data: \{.*\})`", warned[0])
    assert suggestion
    stack.write_text(stack.read_text().replace("handlers:\n", f"handlers:\n  {suggestion[1]}\n"))
    shutil.rmtree(tmp_path / "b")
    assert main([*args, "--out", str(tmp_path / "o3"), "--nf", "streams"]) == 0
    assert "warning" not in capfd.readouterr().err
    assert '"layer":"tcp"' in (tmp_path / "o3" / "flows.jsonl").read_text()
