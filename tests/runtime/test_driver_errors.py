"""Driver errors say where: the file, and the packet for a capture that cannot be read on.

* `rubikgen run` on a missing path reports it once, on a directory says it is a directory;
* the built binary on a directory says so too;
* a capture whose 4th record is cut short: the error names the file and packet 4, in a normal
  run (after processing the three frames before it: they are in the summary) and in `--bench`.
"""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

from support.captures import rubikgen_command
from support.hostile import REPO, STACK, sanitized_tcp_ip


def rubikgen_run(capture: Path) -> subprocess.CompletedProcess[str]:
    argv = [*rubikgen_command(), "run", str(STACK.relative_to(REPO)), str(capture)]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)


def test_run_missing_capture_once(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pcap"
    proc = rubikgen_run(missing)
    assert proc.returncode == 1
    assert proc.stderr.count(str(missing)) == 1, proc.stderr
    assert "no such capture file" in proc.stderr


def test_run_directory(tmp_path: Path) -> None:
    proc = rubikgen_run(tmp_path)
    assert proc.returncode == 1
    assert f"{tmp_path}: is a directory" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1


def test_binary_directory(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(sanitized_tcp_ip()), str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1
    assert f"{tmp_path}: is a directory" in proc.stderr, proc.stderr


def cut_capture(path: Path) -> Path:
    """Three 60-byte Ethernet frames, then a record header promising 80 bytes and 3 of them."""
    frame = bytes(12) + b"\x08\x00" + bytes(46)
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i in range(3):
        out.append(struct.pack("<IIII", 1_700_000_000 + i, 0, len(frame), len(frame)) + frame)
    out.append(struct.pack("<IIII", 1_700_000_003, 0, 80, 80) + b"abc")
    path.write_bytes(b"".join(out))
    return path


def test_cut_capture_names_file_and_packet(tmp_path: Path) -> None:
    pcap = cut_capture(tmp_path / "cut.pcap")
    binary = str(sanitized_tcp_ip())
    proc = subprocess.run(
        [binary, str(pcap), "--summary", "json"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1
    assert f"{pcap}: packet 4: " in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["packets"] == 3  # what was read is processed and reported
    bench = subprocess.run([binary, str(pcap), "--bench"], capture_output=True, text=True)
    assert bench.returncode == 1
    assert f"{pcap}: packet 4: " in bench.stderr, bench.stderr
    # several workers: the reader (one thread) names the packet too
    workers = subprocess.run(
        [binary, str(pcap), "--workers", "2", "--summary", "json"], capture_output=True, text=True
    )
    assert workers.returncode == 1
    assert f"{pcap}: packet 4: " in workers.stderr, workers.stderr
    assert json.loads(workers.stdout)["packets"] == 3
