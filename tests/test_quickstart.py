"""ci/quickstart.sh skips setup when everything is present: `ci/setup.sh --check` decides, and
it must install nothing (no apt-get, pip or sudo) whatever it finds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
    env["PYTHONPATH"] = str(tmp_path)  # not this checkout: reported, still nothing installed
    r = subprocess.run(
        ["bash", "-c", "cd / && exec bash " + str(ROOT / "ci" / "setup.sh") + " --check"],
        env={**env, "PYTHON": "python3 -I"},
        capture_output=True,
        text=True,
    )
    assert not (tmp_path / "ran").exists()


def test_quickstart_calls_setup_only_when_something_is_missing() -> None:
    text = (ROOT / "ci" / "quickstart.sh").read_text()
    assert "bash ci/setup.sh --check" in text
    lines = [ln.strip() for ln in text.splitlines()]
    # the unconditional call is gone: setup runs in the else branch only
    i = lines.index("else")
    assert lines[i + 1] == "bash ci/setup.sh" and lines.count("bash ci/setup.sh") == 1
