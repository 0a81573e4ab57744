"""The command source (runtime-c/src/rg_source_cmd.c, `--io cmd COMMAND`): a capture read from
the standard output of a shell command.

It is the seam's proof: one file and one registry word, with an option of its own (--shell)
that the driver's parser and --help take from its rg_source_ops table.  References: the file
source on the same capture (the run must be the same, but for the capture's name), tshark
rewriting the capture as pcapng on a pipe (its frame count is the packet count), gzip.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.oracle.tshark import REPO, TRACES

CAPTURES = ["http-post-upload.pcap", "mixed-android-mobile.pcap"]


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cmd")
    cmd = [sys.executable, "-m", "rubikgen", "build", str(REPO / "specs/stacks/tcp_ip.yaml")]
    r = subprocess.run([*cmd, "-o", str(out)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return out / "tcp_ip"


def _run(binary: Path, *args: str, out: Path | None = None) -> subprocess.CompletedProcess[str]:
    nf = ["--nf", "streams", "--out", str(out)] if out else []
    return subprocess.run(
        [str(binary), *args, *nf, "--summary", "json"], capture_output=True, text=True, timeout=120
    )


def _summary(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert r.returncode == 0, r.stderr
    s: dict[str, Any] = json.loads(r.stdout)
    s.pop("capture")  # the command, or the file's name
    s.pop("files_written", None)  # the runs write into folders of their own
    return s


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", CAPTURES)
def test_cmd_source_is_the_file_source_on_a_pipe(binary: Path, tmp_path: Path, name: str) -> None:
    cap = TRACES / name
    a, b = tmp_path / "file", tmp_path / "cmd"
    want = _summary(_run(binary, str(cap), out=a))
    got = _summary(_run(binary, "--io", "cmd", f"cat '{cap}'", out=b))
    assert got == want
    assert _tree(b) == _tree(a) and _tree(a)  # the NF's records and streams, byte for byte


def test_cmd_source_reads_tsharks_pcapng(binary: Path) -> None:
    if not shutil.which("tshark"):
        pytest.skip("tshark is not installed")
    cap = TRACES / "mixed-android-mobile.pcap"
    frames = subprocess.run(
        ["tshark", "-r", str(cap), "-T", "fields", "-e", "frame.number"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    got = _summary(_run(binary, "--io", "cmd", f"tshark -r '{cap}' -F pcapng -w -"))
    assert got["packets"] == len(frames) > 0
    assert got == _summary(_run(binary, str(cap)))


def test_cmd_source_own_option_and_gzip(binary: Path, tmp_path: Path) -> None:
    cap = TRACES / "http-post-upload.pcap"
    gz = tmp_path / "c.pcap.gz"
    gz.write_bytes(gzip.compress(cap.read_bytes()))
    bash = shutil.which("bash")
    assert bash
    got = _summary(_run(binary, "--io", "cmd", f"gzip -dc '{gz}'", "--shell", bash))
    assert got == _summary(_run(binary, str(cap)))
    # an option of the cmd source with another source: named as the cmd source's
    r = _run(binary, str(cap), "--shell", bash)
    assert r.returncode == 2 and "--shell applies to --io cmd" in r.stderr, r.stderr
    # --help lists it from the source's table, under its source
    h = subprocess.run([str(binary), "--help"], capture_output=True, text=True).stdout
    assert any(ln.split()[:3] == ["--shell", "PATH", "cmd:"] for ln in h.splitlines()), h


@pytest.mark.parametrize(
    ("command", "msg"),
    [
        ("exit 4", "cmd: exit 4: the command exited with status 4"),
        ("echo not a capture", "its output: unknown file format"),
        ("true", "its output: truncated dump file"),
        ("yes", "its output: unknown file format"),  # still writing: stopped, not waited for
    ],
)
def test_cmd_source_errors(binary: Path, command: str, msg: str) -> None:
    r = _run(binary, "--io", "cmd", command)
    assert r.returncode == 1 and msg in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_cmd_source_command_failing_after_frames(binary: Path) -> None:
    """Frames read before the command failed are kept and summarised; the run fails."""
    cap = TRACES / "http-post-upload.pcap"
    r = _run(binary, "--io", "cmd", f"cat '{cap}'; exit 3")
    assert r.returncode == 1
    assert "the command exited with status 3" in r.stderr, r.stderr
    assert _summary(subprocess.CompletedProcess(r.args, 0, r.stdout, "")) == _summary(
        _run(binary, str(cap))
    )


def test_cmd_source_sanitized(tmp_path: Path) -> None:
    """ASan/UBSan build: whole, cut and failing streams, a command that never writes a capture;
    no sanitizer report."""
    out = tmp_path / "b"
    cmd = [sys.executable, "-m", "rubikgen", "build", str(REPO / "specs/stacks/tcp_ip.yaml")]
    r = subprocess.run(
        [*cmd, "-o", str(out), "--sanitize"], capture_output=True, text=True, cwd=REPO
    )
    assert r.returncode == 0, r.stderr
    cap = TRACES / "mixed-android-mobile.pcap"
    for command, rc in [
        (f"cat '{cap}'", 0),
        (f"head -c 3000 '{cap}'", 1),  # cut inside a record
        (f"cat '{cap}'; exit 3", 1),
        ("yes", 1),
    ]:
        r = subprocess.run(
            [str(out / "tcp_ip-asan"), "--io", "cmd", command, "--nf", "conv"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert r.returncode == rc, (command, r.stderr)
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr
