"""rubikgen installed like any Python tool, the way a user installs it.

Once per session (module fixture): `python -m build` makes an sdist and, from the sdist, a
wheel (so MANIFEST.in and setup.py's package-data hook are both exercised) out of a copy of this
checkout; the wheel is pip-installed into a fresh virtual environment (its dependencies from
PyPI; not --system-site-packages, where the developers' editable install could hide a module
missing from the wheel). Every command then runs with that environment's `rubikgen`, without
PYTHONPATH, from a directory outside the checkout, with its own XDG_CACHE_HOME.

Checked: every module of the source tree imports from the wheel; `--version`; the stock library
validates by reference (`stock:`); no stock or error-corpus spec makes validate report an
internal error (RG900) or a broken installation (RG901), and each corpus case still gets its
expected diagnostics; a wheel missing a subpackage (the old `rubikgen.sema` bug) is reported as
a broken installation (RG901) naming the module; README's "Use it in your repository" runs as
written (its stack and its commands), writing only into the working directory and the cache,
never into the installed package; the flows of that user stack and of the stock `tcp_ip` stack
named by reference, run from the wheel on the bundled capture, equal those of the checkout's
`tcp_ip` stack (bytes by sha256, endpoints, directions, completeness, close reasons).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import REPO_ROOT, readme_snippets

REPO = REPO_ROOT
CAPTURE = REPO / "captures" / "raw-ipv4-ipv6-http.pcap"
CORPUS = REPO / "tests" / "specs" / "errors"
EXPECT = re.compile(r"^#\s*expect:\s*(RG\d{3})\s+(\d+):(\d+)", re.M)
TIMEOUT = 600


def _version() -> str:
    text = (REPO / "rubikgen" / "__init__.py").read_text(encoding="utf-8")
    m = re.search(r'__version__ = "([^"]+)"', text)
    assert m
    return m.group(1)


def _copy_checkout(dst: Path) -> None:
    """The checkout's files as a clean clone has them, plus uncommitted ones (not ignored)."""
    if (REPO / ".git").exists():
        out = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout
        names = [n for n in out.decode().split("\0") if n]
        for n in names:
            if (REPO / n).is_file():
                (dst / n).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / n, dst / n)
    else:
        skip = shutil.ignore_patterns("build", "out", "dist", "*.egg-info", "__pycache__", ".*")
        shutil.copytree(REPO, dst, ignore=skip, dirs_exist_ok=True)


@dataclass
class Installed:
    venv: Path
    env: dict[str, str]
    work: Path  # the user's directory, outside the checkout
    cache: Path  # XDG_CACHE_HOME
    package: Path  # the installed rubikgen package directory

    def run(self, *args: str, cwd: Path | None = None, **kw: object) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(args),
            cwd=cwd or self.work,
            env=kw.pop("env", self.env),  # type: ignore[arg-type]
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            **kw,  # type: ignore[arg-type]
        )

    def rubikgen(self, *args: str) -> subprocess.CompletedProcess:
        return self.run(str(self.venv / "bin" / "rubikgen"), *args)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("install")
    src, dist = tmp / "src", tmp / "dist"
    src.mkdir()
    _copy_checkout(src)
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)],
        cwd=tmp,  # not the checkout, whose build/ directory holds stacks
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = sorted(dist.glob("rubikgen-*.whl"))
    assert len(wheels) == 1 and sorted(dist.glob("rubikgen-*.tar.gz")), list(dist.iterdir())
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=TIMEOUT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RUBIKGEN_SPEC_PATH")}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["XDG_CACHE_HOME"] = str(tmp / "cache")
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the package-unchanged check ignores nothing
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    proc = subprocess.run(
        [*pip, "--disable-pip-version-check", str(wheels[0])],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    work = tmp / "work"
    work.mkdir()
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import rubikgen; print(rubikgen.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    package = Path(where).parent
    assert package.is_relative_to(venv), f"rubikgen imported from {where}, not from the venv"
    return Installed(venv, env, work, tmp / "cache", package)


def _flows(path: Path) -> list[dict[str, object]]:
    recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    assert recs, f"{path}: no flows"
    return sorted(recs, key=lambda r: json.dumps(r, sort_keys=True))


@pytest.fixture(scope="module")
def reference_flows(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    """The checkout's tcp_ip stack on the bundled capture (the editable package)."""
    tmp = tmp_path_factory.mktemp("reference")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("RUBIKGEN_SPEC_PATH", None)
    cmd = [sys.executable, "-m", "rubikgen", "run", "specs/stacks/tcp_ip.yaml", str(CAPTURE)]
    cmd += ["--nf", "streams", "--out", str(tmp / "out"), "--build-dir", str(tmp / "build")]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return _flows(tmp / "out" / "flows.jsonl")


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if "__pycache__" not in p.parts
    }


def test_every_module_imports_from_the_wheel(installed: Installed) -> None:
    script = (
        "import importlib, importlib.util, json, pkgutil, rubikgen\n"
        "names = ['rubikgen'] + [m.name for m in pkgutil.walk_packages(rubikgen.__path__, 'rubikgen.')]\n"
        "files = {n: importlib.import_module(n).__file__ for n in names if n != 'rubikgen.__main__'}\n"
        "files['rubikgen.__main__'] = importlib.util.find_spec('rubikgen.__main__').origin\n"
        "print(json.dumps(files))\n"
    )  # rubikgen.__main__ is found, not run (importing it runs the CLI)
    proc = installed.run(str(installed.venv / "bin" / "python"), "-c", script)
    assert proc.returncode == 0, proc.stderr
    files = json.loads(proc.stdout)
    expected = set()
    for p in (REPO / "rubikgen").rglob("*.py"):
        parts = p.relative_to(REPO).with_suffix("").parts
        expected.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert set(files) == expected, (
        f"missing from the wheel: {sorted(expected - set(files))}; "
        f"unexpected: {sorted(set(files) - expected)}"
    )
    outside = [n for n, f in files.items() if not Path(f).is_relative_to(installed.package)]
    assert not outside, outside


def test_version(installed: Installed) -> None:
    proc = installed.rubikgen("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"rubikgen {_version()}"


def test_package_data(installed: Installed) -> None:
    """The data directories of the checkout, file for file, are in the installed package."""
    data = installed.package / "_data"
    for top, pattern in [
        ("specs", "**/*.yaml"),
        ("schema", "*.json"),
        ("templates", "*.j2"),
        ("runtime-c", "src/*.c"),
        ("runtime-c", "main/*.[ch]"),
        ("runtime-c", "include/**/*.h"),
        ("handlers/nf", "*.[ch]"),
    ]:
        want = sorted(p.relative_to(REPO) for p in (REPO / top).glob(pattern))
        got = sorted(p.relative_to(data) for p in (data / top).glob(pattern))
        assert want and got == want, (top, pattern)
        for rel in want:
            assert (data / rel).read_bytes() == (REPO / rel).read_bytes(), rel


def test_stock_library_validates_by_reference(installed: Installed) -> None:
    files = [p for p in (REPO / "specs").rglob("*") if p.suffix in (".yaml", ".yml", ".toml")]
    proc = installed.rubikgen("validate", "--strict", "stock:")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # test vectors are rubikgen documents too (issue 26): every file is checked
    assert proc.stdout.strip() == f"{len(files)} spec files OK"
    proc = installed.rubikgen("validate", "--strict", "stock:tcp_ip.yaml", "stock:protocols")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_spec_is_an_internal_error(installed: Installed) -> None:
    """Every stock spec and every error-corpus spec through the wheel's validate: never RG900
    or RG901, and the corpus cases get their expected diagnostics (so they were checked)."""
    proc = installed.rubikgen("validate", "--format", "json", str(REPO / "specs"), str(CORPUS))
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    diags = json.loads(proc.stdout)
    internal = [d for d in diags if d["code"] in ("RG900", "RG901")]
    assert not internal, internal
    got = {(Path(d["file"]).name, d["code"], d["line"], d["col"]) for d in diags}
    missing = []
    for case in sorted(CORPUS.glob("*.y*ml")) + sorted(CORPUS.glob("*.toml")):
        text = case.read_text(encoding="utf-8", errors="replace")
        if not text.strip("\n").replace("#", "").strip() or all(
            line.startswith("#") for line in text.splitlines() if line.strip()
        ):
            continue  # nothing but comments: not a document, validate skips it
        for code, line, col in EXPECT.findall(text):
            if (case.name, code, int(line), int(col)) not in got:
                missing.append(f"{case.name}: {code} {line}:{col}")
    assert not missing, missing


def test_broken_installation_is_not_called_a_bug(installed: Installed, tmp_path: Path) -> None:
    """The installed package without rubikgen/sema (the wheel setuptools made before sema got
    its __init__.py): RG901 naming the module, never RG900 or 'rubikgen bug'."""
    broken = tmp_path / "broken"
    shutil.copytree(installed.package, broken / "rubikgen", ignore=shutil.ignore_patterns("sema"))
    spec = installed.package / "_data" / "specs" / "protocols" / "udp.yaml"
    env = dict(installed.env, PYTHONPATH=str(broken))
    python = str(installed.venv / "bin" / "python")
    proc = installed.run(python, "-m", "rubikgen", "validate", str(spec), env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out
    assert "error[RG901]" in out and "'rubikgen.sema" in out, out
    assert "reinstall" in out and "RG900" not in out and "rubikgen bug" not in out, out


def test_readme_user_stack_builds_and_runs(
    installed: Installed, reference_flows: list[dict[str, object]]
) -> None:
    """README's section as written: its stack file and its validate/build/run commands."""
    name, text = readme_snippets.user_stack()
    (installed.work / name).write_text(text, encoding="utf-8")
    shutil.copyfile(CAPTURE, installed.work / "capture.pcap")
    before = _tree(installed.package)
    commands = readme_snippets.user_commands()
    assert [c[1] for c in commands] == ["validate", "build", "run"], commands
    for cmd in commands:
        proc = installed.rubikgen(*cmd[1:])
        assert proc.returncode == 0, f"{cmd}: {proc.stdout}{proc.stderr}"
    stack = re.search(r"^stack:\s*(\S+)", text, re.M)
    assert stack
    s = stack.group(1)
    assert (installed.work / "build" / s / s).is_file()
    assert (installed.work / "build" / s / f"{s}_handlers.c").is_file()
    flows = installed.work / "out" / f"{s}-capture" / "flows.jsonl"
    assert _flows(flows) == reference_flows
    # nothing written into the installed package; the runtime went to the cache
    assert _tree(installed.package) == before
    libs = list((installed.cache / "rubikgen").glob(f"{_version()}-*/librgrt.a"))
    assert len(libs) == 1, libs
    assert not (installed.package / "_data" / "runtime-c" / "build").exists()


def test_stock_stack_by_reference_runs(
    installed: Installed, reference_flows: list[dict[str, object]]
) -> None:
    shutil.copyfile(CAPTURE, installed.work / "capture.pcap")
    out = installed.work / "out" / "stock"
    proc = installed.rubikgen(
        "run", "stock:tcp_ip.yaml", "capture.pcap", "--nf", "streams", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (installed.work / "build" / "tcp_ip" / "tcp_ip").is_file()
    assert _flows(out / "flows.jsonl") == reference_flows
