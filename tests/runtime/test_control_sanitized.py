"""`--control` (the observer behind `ctl flows`, runtime-c/main/rg_flowdump.c) under ASan and
UBSan, on captures with IP fragments, lingering TCP connections and one-packet instances.

A regression test: the observer refreshed its copy of each instance a packet touched from the
stack's record at the end of the packet, after the record had been freed (moved to the linger
table) - a use-after-poison on these captures with one context and with two workers.  Checked
too: with and without `--control` the summary and the flow records are the same; and
`--nf none --control` (a chain whose counter counts no handler calls) runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.hostile import run_json, sanitized_tcp_ip
from support.oracle import TRACES

CAPTURES = ["http-post-upload.pcap", "ipv4-frag-socks5-http.pcap", "ipv6-http-atomic-frag.pcap"]


def _records(out: Path) -> list[str]:
    return sorted((out / "flowstats.jsonl").read_text().splitlines())


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", CAPTURES)
def test_control_is_clean_and_changes_nothing(tmp_path: Path, name: str, workers: int) -> None:
    src = TRACES / name
    if not src.is_file():
        pytest.skip(f"{name} is not in {TRACES}")
    binary = sanitized_tcp_ip()
    pcap = tmp_path / name
    pcap.write_bytes(src.read_bytes())
    args = ["--flowstats-all", "--seed", "1"] + (["--workers", str(workers)] if workers else [])
    plain, out_plain, _ = run_json(binary, pcap, "flowstats", *args)
    records = _records(out_plain)
    ctl = tmp_path / "ctl.sock"
    with_ctl, out_ctl, _ = run_json(binary, pcap, "flowstats", *args, "--control", str(ctl))
    for s in (plain, with_ctl):
        s.pop("files_written", None)
    assert json.dumps(with_ctl, sort_keys=True) == json.dumps(plain, sort_keys=True)
    assert _records(out_ctl) == records and records


def test_nf_none_with_control(tmp_path: Path) -> None:
    """--nf none leaves the counter without on_call; the chain that --control makes called it (a NULL call)."""
    src = TRACES / CAPTURES[0]
    if not src.is_file():
        pytest.skip(f"{src.name} is not in {TRACES}")
    binary = sanitized_tcp_ip()
    pcap = tmp_path / src.name
    pcap.write_bytes(src.read_bytes())
    plain, _, _ = run_json(binary, pcap, "none")
    with_ctl, _, _ = run_json(binary, pcap, "none", "--control", str(tmp_path / "ctl.sock"))
    assert with_ctl["packets"] == plain["packets"] > 0
