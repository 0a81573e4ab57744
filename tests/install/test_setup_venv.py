"""ci/setup.sh on a PEP 668 system (issue 26): the quick start's Python step must not install
into an externally managed interpreter.

The interpreter is one that carries PEP 668's EXTERNALLY-MANAGED marker in its standard
library directory and is not itself a virtual environment (pip ignores the marker inside one):
Debian's /usr/bin/python3, or another found on PATH. First pip itself is shown to refuse it
(`externally-managed-environment`); then the setup's Python step (`ci/setup.sh --python-only`)
is run with it, as a user on Debian 12 runs the quick start, and must succeed without
--break-system-packages: the package of this checkout is then importable from the virtual
environment it made, and `--check` says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support import REPO_ROOT

REPO = REPO_ROOT
PROBE = (
    "import os, sys, sysconfig; "
    "print(int(sys.prefix == sys.base_prefix and "
    "os.path.isfile(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED'))))"
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYENV", "VIRTUAL_ENV"))}
    env.pop("PYTHONPATH", None)
    return {**env, **extra}


def _managed_python() -> str | None:
    seen = ["/usr/bin/python3"]
    for d in os.environ.get("PATH", "").split(os.pathsep):
        seen.append(os.path.join(d, "python3"))
    for cand in seen:
        if not os.access(cand, os.X_OK):
            continue
        p = subprocess.run([cand, "-c", PROBE], capture_output=True, text=True, env=_env())
        if p.returncode == 0 and p.stdout.strip() == "1":
            return cand
    return None


MANAGED = _managed_python()


@pytest.mark.skipif(MANAGED is None, reason="no externally managed (PEP 668) python3 here")
def test_setup_installs_into_a_venv_on_an_externally_managed_python(tmp_path: Path) -> None:
    assert MANAGED is not None
    # the marker is in force: pip refuses this interpreter
    refused = subprocess.run(
        [MANAGED, "-m", "pip", "install", "--no-index", "--no-deps", "rubikgen-no-such"],
        capture_output=True,
        text=True,
        env=_env(),
    )
    if "No module named pip" in refused.stderr:
        pytest.skip(f"{MANAGED} has no pip")
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr
    assert "--break-system-packages" not in (REPO / "ci" / "setup.sh").read_text()
    venv = tmp_path / "venv"
    env = _env(PYTHON=MANAGED, RG_VENV=str(venv))
    setup = ["bash", str(REPO / "ci" / "setup.sh")]
    assert subprocess.run([*setup, "--python-only", "--check"], env=env, cwd=REPO).returncode == 1
    p = subprocess.run(
        [*setup, "--python-only"], env=env, cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert f". {venv}/bin/activate" in p.stdout  # it says how to use it
    # this checkout's package, from the environment, wherever it runs
    where = subprocess.run(
        [venv / "bin" / "python", "-c", "import rubikgen; print(rubikgen.__file__)"],
        cwd="/",
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert where.stdout.strip() == str(REPO / "rubikgen" / "__init__.py"), where.stderr
    ok = subprocess.run(
        [venv / "bin" / "rubikgen", "validate", "specs/stacks/tcp_ip.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert subprocess.run([*setup, "--python-only", "--check"], env=env, cwd=REPO).returncode == 0
    shutil.rmtree(venv)
