"""The code blocks of README.md's "Use it in your repository" and "pre-commit" sections, so
that tests/install/test_install.py and tests/install/test_precommit.py run what the README says, as written."""

from __future__ import annotations

import re
import shlex

from support import REPO_ROOT

README = REPO_ROOT / "README.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def blocks(title: str, lang: str) -> list[str]:
    return [body for kind, body in _BLOCK.findall(section(title)) if kind == lang]


def user_stack() -> tuple[str, str]:
    """(file name, text) of the user stack: the yaml block starting with '# NAME.yaml'."""
    for body in blocks("Use it in your repository", "yaml"):
        first = body.splitlines()[0]
        if first.startswith("# ") and first.endswith((".yaml", ".yml")):
            return first[2:].strip(), body
    raise AssertionError("README: no user stack block ('# NAME.yaml' first line)")


def user_commands() -> list[list[str]]:
    """The `rubikgen ...` commands of the section's sh blocks after the install block (the
    validate/build/run block), comments stripped."""
    cmds = []
    for body in blocks("Use it in your repository", "sh")[1:]:
        for line in body.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("rubikgen "):
                cmds.append(shlex.split(line))
    assert cmds, "README: no rubikgen commands in 'Use it in your repository'"
    return cmds


def precommit_config(repo: str, rev: str) -> str:
    """The README's .pre-commit-config.yaml snippet with its repo and rev replaced."""
    (body,) = [b for b in blocks("pre-commit", "yaml") if b.startswith("repos:")]
    body, n1 = re.subn(r"(?m)^(\s*- repo:\s*)\S+.*$", lambda m: m.group(1) + repo, body)
    body, n2 = re.subn(r"(?m)^(\s*rev:\s*)\S+.*$", lambda m: m.group(1) + rev, body)
    assert n1 == n2 == 1, body
    return body


def rules_example() -> str:
    """The rules file of README.md's "Rules" section (its `spec:` relative to docs/examples)."""
    (body,) = blocks("Rules: drop, count and rewrite without C", "yaml")
    return body
