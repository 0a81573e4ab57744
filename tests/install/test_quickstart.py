"""ci/quickstart.sh skips setup when everything is present: `ci/setup.sh --check` decides, and
it must install nothing (no apt-get, pip or sudo) whatever it finds. Its first screen
(everything it prints after setup) fits in 40 lines and shows whole conversations: the flow
table it prints lists tshark's conversations of the bundled capture, every direction with
bytes, every TCP connection complete."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from support import REPO_ROOT

ROOT = REPO_ROOT


def _shims(tmp: Path) -> dict[str, str]:
    """PATH with apt-get, pip and sudo replaced by scripts that record that they ran."""
    bin_ = tmp / "bin"
    bin_.mkdir()
    for name in ("apt-get", "pip", "pip3", "sudo", "debconf-set-selections"):
        f = bin_ / name
        f.write_text(f'#!/bin/sh\necho {name} >> "{tmp}/ran"\nexit 1\n')
        f.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_}:{env['PATH']}"
    env["PYTHONPATH"] = str(ROOT)  # this checkout is the installed package
    return env


def test_setup_check_installs_nothing(tmp_path: Path) -> None:
    env = _shims(tmp_path)
    r = subprocess.run(
        ["bash", "ci/setup.sh", "--check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert not (tmp_path / "ran").exists(), (tmp_path / "ran").read_text()
    # on a machine set up by ci/setup.sh (as CI's is) everything is present
    assert r.returncode == 0, r.stdout + r.stderr
    # no environment (or another checkout's): reported, still nothing installed
    r = subprocess.run(
        ["bash", "-c", "cd / && exec bash " + str(ROOT / "ci" / "setup.sh") + " --check"],
        env={**env, "RG_VENV": str(tmp_path / "no-venv")},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "not installed" in r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "ran").exists()


def test_quickstart_calls_setup_only_when_something_is_missing() -> None:
    text = (ROOT / "ci" / "quickstart.sh").read_text()
    assert "bash ci/setup.sh --check" in text
    lines = [ln.strip() for ln in text.splitlines()]
    # the unconditional call is gone: setup runs in the else branch only
    i = lines.index("else")
    assert lines[i + 1] == "bash ci/setup.sh" and lines.count("bash ci/setup.sh") == 1


def test_first_screen_fits_and_shows_whole_conversations(tmp_path: Path) -> None:
    from support.oracle import tshark_available
    from support.oracle.tshark import conversations

    env = _shims(tmp_path)
    r = subprocess.run(
        ["bash", "ci/quickstart.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (tmp_path / "ran").exists()  # set up already: nothing installed
    lines = r.stdout.splitlines()
    assert lines[0].startswith("quickstart: everything is installed")
    screen = lines[1:] + r.stderr.splitlines()
    assert len(screen) <= 40, "\n".join(screen)
    assert not any(ln.startswith("instances per layer") for ln in screen)  # --summary full only
    table = screen[screen.index(next(ln for ln in screen if ln.startswith("proto "))) + 1 :]
    rows = [ln.split() for ln in table if ln.startswith(("tcp ", "udp "))]
    assert rows and all(int(row[-2]) > 0 for row in rows), table  # data every way
    assert all(row[-1] == "yes" for row in rows if row[0] == "tcp"), table
    if tshark_available():
        convs = conversations(ROOT / "captures" / "veth-http-udp-frag.pcap")
        assert len(rows) == 2 * len(convs)
