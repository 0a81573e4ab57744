"""The pre-commit hook used the way a user uses it: from another repository, by the real
pre-commit framework, on `git commit`.

A scratch git repository holds a stack in a folder that is not `specs/` (README's user stack,
which names the stock protocols with `stock:`), a CI workflow (YAML, not a spec), a text and a
Markdown file, and README's `.pre-commit-config.yaml` snippet with `repo:` = this checkout's path
and `rev:` = its HEAD commit. pre-commit clones that commit and pip-installs it into an
environment of its own (network access to PyPI for the dependencies). pre-commit sees committed
files only: uncommitted changes of this checkout are not what this test runs (README says so).

Checked: committing the valid stack passes; the hook gets the spec and the YAML files only
(validate's summary counts one spec and two skipped non-rubikgen documents; the text file would
fail the hook if it were passed); committing an invalid spec fails with its own RG code and
file:line:col, as validate in this process reports it, never RG900 or RG901.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import REPO_ROOT, readme_snippets

from rubikgen.front.workspace import Workspace

REPO = REPO_ROOT
TIMEOUT = 600

pytestmark = pytest.mark.skipif(
    not (REPO / ".git").exists() or shutil.which("git") is None,
    reason="needs a git checkout of rubikgen (the hook is installed from a commit)",
)

# Not a spec, but would fail validation if the hook were given it.
NOTES = "protocol: not_a_spec\nlayouts: 3\n"
WORKFLOW = """\
name: CI
on: [push]
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - run: echo ok
"""
# A spec with an error: a field the layout does not have.
BAD = """\
protocol: bad
layouts:
  hdr: {kind: 8, length: 8}
header: [hdr]
prep:
  - "set_sdu(payload[header.size:])"
"""


@dataclass
class Scratch:
    path: Path
    env: dict[str, str]

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(args),
            cwd=self.path,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )

    def git(self, *args: str) -> subprocess.CompletedProcess:
        proc = self.run("git", *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc


def _pre_commit() -> list[str]:
    exe = shutil.which("pre-commit")
    return [exe] if exe else ["python3", "-m", "pre_commit"]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Scratch:
    tmp = tmp_path_factory.mktemp("precommit")
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    env.pop("PYTHONPATH", None)
    env.pop("RUBIKGEN_SPEC_PATH", None)
    env.update(
        PRE_COMMIT_HOME=str(tmp / "pre-commit-home"),  # its own hook environments
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=str(tmp / "gitconfig"),  # no user git configuration (hooks, signing)
    )
    (tmp / "gitconfig").write_text("", encoding="utf-8")
    s = Scratch(tmp / "repo", env)
    s.path.mkdir()
    s.git("init", "-q")
    name, stack = readme_snippets.user_stack()
    files = {
        f"net/{name}": stack,
        ".github/workflows/ci.yml": WORKFLOW,
        "notes.txt": NOTES,
        "docs/index.md": "# docs\nprotocol: x\n",
        ".pre-commit-config.yaml": readme_snippets.precommit_config(str(REPO), head),
    }
    for rel, text in files.items():
        (s.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (s.path / rel).write_text(text, encoding="utf-8")
    proc = s.run(*_pre_commit(), "install")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return s


def test_valid_spec_commits(scratch: Scratch) -> None:
    scratch.git("add", "-A")
    proc = scratch.run("git", "commit", "-q", "-m", "specs")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "rubikgen validate" in out and "Passed" in out, out
    # which files the hook was given: the spec and the two YAML files that are not specs
    proc = scratch.run(*_pre_commit(), "run", "--all-files", "--verbose")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "1 spec file OK (2 other YAML/TOML files skipped)" in out, out


def test_invalid_spec_fails_with_its_diagnostic(scratch: Scratch) -> None:
    bad = scratch.path / "proto" / "bad.yaml"
    bad.parent.mkdir(exist_ok=True)
    bad.write_text(BAD, encoding="utf-8")
    ws = Workspace()
    ws.check(str(bad))
    errors = [d for d in ws.all_diagnostics() if d.severity == "error"]
    assert [d.code for d in errors] == ["RG011"], errors  # unknown name header.size
    want = f"proto/bad.yaml:{errors[0].line}:{errors[0].col}: error[RG011]"
    head = scratch.git("rev-parse", "HEAD").stdout
    scratch.git("add", "proto/bad.yaml")
    proc = scratch.run("git", "commit", "-q", "-m", "bad spec")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert want in out, out
    assert "RG900" not in out and "RG901" not in out, out
    assert scratch.git("rev-parse", "HEAD").stdout == head  # the commit was refused


# Every document kind (issue 26), next to the user's stack: each must stay valid here, and
# garbage, a syntax error or a truncation in it must stop the hook at file:line:col.
KINDS = {
    "gate/rules.yaml": (
        "spec: ../net/{stack}\n"
        "rules:\n"
        '  - {{name: telnet, match: "tcp.dport == 23", action: drop}}\n'
        '  - {{name: web, match: "tcp.dport == 80 && ip.saddr == 10.0.0.0/8", action: pass}}\n'
    ),
    "gate/chain.yaml": "chain:\n  - nf: flowstats\n    params: {{all: true}}\n  - nf: events\n",
    "gate/udp.test.yaml": (
        "test: one UDP datagram\n"
        "spec: ../net/{stack}\n"
        "cases:\n"
        "  - name: one\n"
        "    packets:\n"
        '      - {{ipv4: {{src: 10.0.0.1, dst: 10.0.0.2}}, udp: {{sport: 1, dport: 2}}, payload: "x"}}\n'
        "    expect:\n"
        '      streams: [{{layer: udp, data: "x"}}]\n'
    ),
}


def _breaks(text: str) -> dict[str, bytes]:
    """Garbage (bytes that are not UTF-8), a syntax error (the issue's unclosed flow), and a
    truncation inside a flow mapping (PyYAML refuses each)."""
    lines = text.splitlines(keepends=True)
    cut = text.rindex("{") + 3
    return {
        "garbage": bytes(range(256))[::-1][:200],
        "syntax": "".join(lines[:2] + ["  bad: [unclosed, {x: \n"] + lines[2:]).encode(),
        "truncation": text[:cut].encode(),
    }


def test_every_kind_broken_fails_the_hook(scratch: Scratch) -> None:
    import json

    import yaml

    from rubikgen.cli import main

    stack_name, _ = readme_snippets.user_stack()
    stack = scratch.path / "net" / stack_name
    targets = {"net/" + stack_name: stack.read_text(encoding="utf-8")}
    for rel, text in KINDS.items():
        targets[rel] = text.format(stack=stack_name)
        (scratch.path / rel).parent.mkdir(exist_ok=True)
        (scratch.path / rel).write_text(targets[rel], encoding="utf-8")
    scratch.git("add", *KINDS)
    proc = scratch.run(*_pre_commit(), "run", "rubikgen-validate", "--verbose", "--files", *targets)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 spec files OK" in proc.stdout + proc.stderr
    for rel, text in targets.items():
        f = scratch.path / rel
        try:
            for what, broken in _breaks(text).items():
                try:  # certainly broken: PyYAML refuses it too
                    yaml.safe_load(broken.decode("utf-8"))
                except (yaml.YAMLError, UnicodeDecodeError):
                    pass
                else:
                    raise AssertionError(f"{rel} {what}: PyYAML reads it")
                f.write_bytes(broken)
                scratch.git("add", rel)
                # where this process's validate reports it
                import contextlib
                import io

                buf = io.StringIO()
                with contextlib.redirect_stdout(buf):
                    assert main(["validate", "--format", "json", str(f)]) == 1
                d = json.loads(buf.getvalue())[0]
                proc = scratch.run(*_pre_commit(), "run", "rubikgen-validate", "--files", rel)
                out = proc.stdout + proc.stderr
                assert proc.returncode == 1, (rel, what, out)
                assert f"{rel}:{d['line']}:{d['col']}: error[{d['code']}]" in out, (rel, what, out)
                assert "Traceback" not in out and "RG900" not in out, out
        finally:
            f.write_text(text, encoding="utf-8")
            scratch.git("add", rel)


def test_exclude_leaves_out_what_is_not_yaml(scratch: Scratch) -> None:
    """A file that does not parse fails the hook whatever it is meant as (a template), until
    the configuration's `exclude:` leaves it out, as for any pre-commit hook."""
    rel = "templates/values.yaml"
    (scratch.path / "templates").mkdir(exist_ok=True)
    (scratch.path / rel).write_text("name: {{ .Values.name }\n", encoding="utf-8")
    scratch.git("add", rel)
    proc = scratch.run(*_pre_commit(), "run", "rubikgen-validate", "--files", rel)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and f"{rel}:1:" in out and "error[RG001]" in out, out
    config = scratch.path / ".pre-commit-config.yaml"
    original = config.read_text(encoding="utf-8")
    try:
        config.write_text(
            original.replace(
                "- id: rubikgen-validate", "- id: rubikgen-validate\n        exclude: ^templates/"
            ),
            encoding="utf-8",
        )
        assert "exclude: ^templates/" in config.read_text(encoding="utf-8")
        scratch.git("add", ".pre-commit-config.yaml")
        proc = scratch.run(*_pre_commit(), "run", "rubikgen-validate", "--files", rel)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0 and "Skipped" in out, out
    finally:
        config.write_text(original, encoding="utf-8")
        scratch.git("add", ".pre-commit-config.yaml", rel)
