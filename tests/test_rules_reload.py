"""Rule sets swapped while a capture is replayed (docs/rules.md, reload: `--rules-reload`,
`rubikgen ctl SOCKET rules reload R.yaml`).

A real capture is written into a FIFO the binary reads, a record at a time; the binary starts
with rules A (drop HTTPS), a rules file with an error is refused mid-replay (A keeps running),
then rules B (drop DNS) are swapped in. The reload's acknowledgement names the last packet A
judged. Checked against tshark's own filters of the capture: the written capture is exactly
the input without A's frames up to that packet and B's after it, byte for byte; nothing is
lost; the streams the run reassembled (flows spanning the reload) equal those of a run
without reload. The compiled-in rules of a --rules-reload build give the hits and the
written capture of a plain build (tests/test_rules.py's rules on the same capture).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from oracle import TRACES, tshark_available
from test_nf_control import PAUSE, TRICKLE, _records
from test_rules import pcap_frames, tshark_numbers

from captures import REPO

pytestmark = pytest.mark.serial  # paced input (ci/test.sh runs these alone)

STACK = REPO / "specs" / "stacks" / "tcp_ip.yaml"
ENV = dict(os.environ, PYTHONPATH=str(REPO))
CAPTURE = TRACES / "mixed-android-mobile.pcap"

RULES_A = """\
rules:
  - {name: https, match: "tcp.dport == 443 || tcp.sport == 443", action: drop}
"""
RULES_B = """\
rules:
  - {name: dns, match: "udp.dport == 53 || udp.sport == 53", action: drop}
"""
RULES_BAD = """\
rules:
  - {name: dns, match: "udp.dprt == 53", action: drop}
"""
# the same in tshark's filter language (the stack's tcp/udp layers are over IPv4)
FILTER_A = "!ipv6 && tcp.port == 443"
FILTER_B = "!ipv6 && udp.port == 53"


def rubikgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rubikgen", *args], capture_output=True, text=True, env=ENV,
        timeout=600, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def reload_binary(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("rules-reload")
    a = d / "a.rules.yaml"
    a.write_text(RULES_A, encoding="utf-8")
    p = rubikgen("build", str(STACK), "--rules", str(a), "--rules-reload", "-o", str(d / "b"))
    assert p.returncode == 0, p.stderr
    return d / "b" / "tcp_ip", d


def _summary(out: str) -> dict[str, object]:
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.skipif(not tshark_available(), reason="needs tshark")
def test_reload_mid_replay_swaps_at_a_packet_boundary(
    reload_binary: tuple[Path, Path], tmp_path: Path
) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    binary, _ = reload_binary
    b, bad = tmp_path / "b.rules.yaml", tmp_path / "bad.rules.yaml"
    b.write_text(RULES_B, encoding="utf-8")
    bad.write_text(RULES_BAD, encoding="utf-8")
    head, records = _records(CAPTURE)

    # the reference streams: a run without reload (rules do not change what is reassembled)
    ref_dir = tmp_path / "ref"
    ref = subprocess.run(
        [str(binary), str(CAPTURE), "--nf", "streams", "--out", str(ref_dir), "--summary",
         "json"], capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ref.returncode == 0, ref.stderr

    fifo, sock, out = tmp_path / "in.pcap", tmp_path / "ctl.sock", tmp_path / "out.pcap"
    os.mkfifo(fifo)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [str(binary), str(fifo), "--nf", "streams", "--out", str(run_dir), "--control",
         str(sock), "--write", str(out), "--summary", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    written = [0]
    third = len(records) // 3
    done = threading.Event()  # the writer trickles from a third on until the reload is done

    def writer() -> None:
        with open(fifo, "wb", buffering=0) as f:
            f.write(head)
            for i, r in enumerate(records):
                f.write(r)
                written[0] += 1
                time.sleep(TRICKLE if i >= third and not done.is_set() else PAUSE)

    t = threading.Thread(target=writer)
    t.start()
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        while written[0] < third:
            time.sleep(0.01)
        # an error in the rules: refused with its position, A keeps running
        p = rubikgen("ctl", str(sock), "rules", "reload", str(bad))
        assert p.returncode == 1, p.stdout
        assert f"{bad}:2:25: error[RG011]" in p.stderr and "did you mean 'dport'" in p.stderr
        assert "the rules in force are kept" in p.stderr
        p = rubikgen("ctl", str(sock), "rules", "reload", str(b))
        assert p.returncode == 0, p.stderr
        words = p.stdout.split()
        assert words[:4] == ["loaded", "1", "rules", "of"], p.stdout
        boundary = int(words[words.index("packet") + 1])
        p = rubikgen("ctl", str(sock), "rules", "info")
        assert p.returncode == 0 and "reloads\t1\n" in p.stdout, p.stdout
    finally:
        done.set()
        t.join()
        so, se = proc.communicate(timeout=120)
    assert proc.returncode == 0, se
    assert third <= boundary < len(records)

    drop_a = {n for n in tshark_numbers(CAPTURE, FILTER_A) if n <= boundary}
    drop_b = {n for n in tshark_numbers(CAPTURE, FILTER_B) if n > boundary}
    assert drop_a and drop_b, "nothing to drop on one side: the test would prove nothing"
    frames_in = pcap_frames(CAPTURE)
    want = [f for i, f in enumerate(frames_in, 1) if i not in drop_a and i not in drop_b]
    got = pcap_frames(out)
    assert got == want  # every other frame, byte for byte, in order
    assert len(got) + len(drop_a) + len(drop_b) == len(records)  # nothing lost
    s = _summary(so)
    assert s["packets"] == len(records)
    # the set in force at the end, counted from the reload on; the reloads
    assert s["rules"] == [{"name": "dns", "action": "drop", "hits": len(drop_b)}]
    assert s["rule_reloads"] == 1
    # flows spanning the reload kept their state: the same streams as without reload
    ref_files = sorted(p.relative_to(ref_dir) for p in ref_dir.rglob("*") if p.is_file())
    run_files = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*") if p.is_file())
    assert ref_files == run_files and len(ref_files) > 3
    for rel in ref_files:
        assert (ref_dir / rel).read_bytes() == (run_dir / rel).read_bytes(), rel
