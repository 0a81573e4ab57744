"""`rubikgen run` on a capture file shows a progress bar on standard error when it is a terminal
(a pseudo-terminal here, python's pty), fed by the binary's --stats-fd lines; nothing when
standard error is not a terminal, or with --quiet.  The summary on standard output is the same
in every case."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from support.captures import REPO, STACK
from support.oracle import TRACES

CAPTURE = TRACES / "mixed-android-mobile.pcap"


def _run(binary: Path, out: Path, *extra: str, tty: bool) -> tuple[int, str, str]:
    """(status, stdout, stderr) of rubikgen run, stderr on a pseudo-terminal or a pipe."""
    cmd = [sys.executable, "-m", "rubikgen", "run", str(STACK), str(CAPTURE), "--nf", "count"]
    cmd += ["--build-dir", str(binary.parent), "--out", str(out), "--summary", "json", *extra]
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120")
    if not tty:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
        return r.returncode, r.stdout, r.stderr
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal's size
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=REPO)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:  # EIO: every writer of the terminal has closed it
            break
        if not b:
            break
        chunks.append(b)
    os.close(master)
    assert proc.stdout is not None
    stdout = proc.stdout.read().decode()
    proc.wait(60)
    return proc.returncode, stdout, b"".join(chunks).decode(errors="replace")


def test_progress_on_a_terminal_only(binary: Path, tmp_path: Path) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    rc, out_tty, err_tty = _run(binary, tmp_path / "a", tty=True)
    assert rc == 0, err_tty
    summary = json.loads(out_tty.strip().splitlines()[-1])
    # the bar: the file's name, its percentage and size, and the packets of the last snapshot
    # (the final one, which the binary writes at its end: the whole file)
    assert CAPTURE.name in err_tty
    assert "100%" in err_tty and "138k" in err_tty, err_tty
    assert f"{summary['packets']} pkts" in err_tty, err_tty

    rc, out_pipe, err_pipe = _run(binary, tmp_path / "b", tty=False)
    assert rc == 0, err_pipe
    assert "pkts" not in err_pipe and "%|" not in err_pipe, err_pipe
    rc, out_quiet, err_quiet = _run(binary, tmp_path / "c", "--quiet", tty=True)
    assert rc == 0, err_quiet
    assert "pkts" not in err_quiet and "%|" not in err_quiet, err_quiet
    assert json.loads(out_pipe.strip().splitlines()[-1]) == summary
    assert json.loads(out_quiet.strip().splitlines()[-1]) == summary
