"""The docs say what the code does (issue 26, item 4).

Checked against the command lines' own `--help` (every `rubikgen` subcommand and a built
stack binary's, so the reference is what the parsers accept, not a list written here):

* no sentence of README.md or docs/ says a feature is missing ("not yet", "not supported",
  "planned", ...) while `--help` lists the flag that provides it: a flag named in the sentence,
  or one of the features below, each with the flag it ships as;
* every flag a doc gives to `rubikgen` or a stack binary (in a command line of a code block
  or a code span) is one that command's `--help` knows;
* every relative link and every `*.md` file named in prose exists in the repository (the docs
  stand alone: nothing outside the repository is cited).

The checkers are also run on the README's old Status paragraph ("Not yet: live capture, DPDK
and multi-core, rules that drop or rewrite") and on made-up bad lines, which they must flag.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.toolchain.build import build

ROOT = REPO_ROOT
DOCS = sorted(
    [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "captures" / "README.md"]
    + [ROOT / "runtime-c" / "README.md", ROOT / "bench" / "README.md"]
    + list((ROOT / "docs").rglob("*.md"))
)
SUBCOMMANDS = ("validate", "schema", "graph", "build", "run", "check", "ctl", "stubs", "ir", "test")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")

# Features a doc may call missing, and the flag each ships as (listed by --help when it ships).
FEATURES = {
    r"live capture|live interface": "--iface",
    r"\bDPDK\b": "--dpdk",
    r"multi-?core|several cores|\bworkers\b": "--workers",
    r"\binline\b": "--inline",
    r"rules? (?:that )?(?:drop|rewrite)": "--rules",
    r"checksum": "--checksums",
    r"memory caps?|memcap": "--memcap",
    r"control socket|attach": "--control",
    r"chains? of NFs|NF chains?": "--chain",
}
MISSING = re.compile(
    # "not yet delivered/acknowledged" describes data, not a feature
    r"\bnot yet\b(?! (?:delivered|acknowledged|acked|seen|sent|received|buffered|known)\b)|\bnot (?:supported|implemented|available)\b|\bunsupported\b|\bplanned\b"
    r"|\bTODO\b|\bcoming soon\b|\bmissing:",
    re.I,
)


def _help(argv: list[str]) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
    return p.stdout + p.stderr


@cache
def known_flags() -> dict[str, frozenset[str]]:
    """Per command ('rubikgen', 'rubikgen SUB', 'binary'): the flags its --help lists."""
    py = [sys.executable, "-m", "rubikgen"]
    out = {"rubikgen": frozenset(FLAG.findall(_help([*py, "--help"])))}
    for sub in SUBCOMMANDS:
        text = _help([*py, sub, "--help"])
        # sub-subcommands ({attach,detach,...}), after the positional before them if any
        for group in re.findall(r"\{([\w,-]+)\}", text.split("\n\n")[0]):
            for choice in group.split(","):
                text += _help([*py, sub, choice, "--help"]) + _help([*py, sub, "X", choice, "-h"])
        out[f"rubikgen {sub}"] = frozenset(FLAG.findall(text))
    binary = build(ROOT / "specs" / "stacks" / "tcp_ip.yaml", ROOT / "build" / "tcp_ip", quiet=True)
    out["binary"] = frozenset(FLAG.findall(_help([str(binary.binary), "--help"])))
    return out


def every_flag() -> frozenset[str]:
    return frozenset().union(*known_flags().values())


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, sentence-ish chunk) of the text outside code blocks, paragraph by
    paragraph (a sentence may wrap)."""
    para: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.startswith("|"):  # a table row is a chunk of its own
            yield n, line
            continue
        if line.strip():
            para.append((n, line))
            continue
        if para:
            yield para[0][0], " ".join(t for _, t in para)
        para = []
    if para:
        yield para[0][0], " ".join(t for _, t in para)


def missing_claims(text: str, listed: frozenset[str]) -> list[str]:
    """Sentences of text that call a feature or flag missing while --help lists it."""
    found = []
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        words = re.sub(r"`[^`]*`", "`…`", sentence)  # a code span is no claim (UNSUPPORTED)
        m = MISSING.search(words)
        if not m:
            continue
        rest = words[m.start() :]
        for flag in FLAG.findall(sentence):
            if flag in listed:
                found.append(f"{flag} is said to be missing ({sentence.strip()!r})")
        for phrase, flag in FEATURES.items():
            if re.search(phrase, rest, re.I) and flag in listed:
                found.append(f"'{phrase}' ({flag}) is said to be missing ({sentence.strip()!r})")
    return found


def _commands(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, command, its arguments) of the doc's rubikgen and stack-binary command lines:
    lines of code blocks and code spans that start with one."""
    lead = re.compile(
        r"^(?:\$ )?(?:python3? -m rubikgen|rubikgen|(?:\.?\.?/)?build/\w[\w-]*/\w+|BINARY"
        r"|DIR/S)\s+(.*)$"
    )
    fenced = False
    lines = path.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines, 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        k = n
        while fenced and line.endswith("\\") and k < len(lines):  # a command continued
            line = line[:-1] + " " + lines[k]
            k += 1
        chunks = [line] if fenced else re.findall(r"`([^`]+)`", line)
        for chunk in chunks:
            m = lead.match(chunk.strip())
            if not m:
                continue
            # a quoted argument is one value (--dpdk "EAL ARGS", --bpf "...")
            args = re.sub(r'"[^"]*"|\'[^\']*\'', "V", m[1].split(" #")[0])
            if chunk.strip().startswith(("rubikgen", "python", "$ ")):
                words = args.split()
                subs = [w for w in (words[0].split("|") if words else []) if w in SUBCOMMANDS]
                for sub in subs or [""]:
                    yield n, f"rubikgen {sub}".strip(), args
            else:
                yield n, "binary", args


def unknown_flags(command: str, args: str, known: dict[str, frozenset[str]]) -> list[str]:
    # after a lone `--` the arguments are another program's (the binary's, DPDK's EAL)
    own = re.split(r"(?:^|\s)--(?:\s|$)", args)[0]
    allowed = known.get(command, frozenset())
    if command.startswith("rubikgen "):
        allowed |= known["rubikgen"]
    return [f for f in FLAG.findall(own) if f not in allowed]


LINK = re.compile(r"\]\(([^)\s]+)\)")
MD_NAME = re.compile(r"(?<![\w/.:-])((?:\.\./)?[\w./-]*\w\.md)\b")


def missing_files(path: Path) -> list[str]:
    """Relative links and *.md names of path that name no file of the repository."""
    bad = []
    text = path.read_text(encoding="utf-8")
    for n, line in enumerate(text.splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            rel = target.split("#")[0]
            if rel and not (path.parent / rel).exists():
                bad.append(f"{path.relative_to(ROOT)}:{n}: link to {target}: no such file")
        for name in MD_NAME.findall(re.sub(r"https?://\S+", "", line)):
            if not any((d / name).exists() for d in (path.parent, ROOT, ROOT / "docs")):
                bad.append(f"{path.relative_to(ROOT)}:{n}: names {name}: no such file")
    return bad


OLD_STATUS = (
    "on top of the C runtime in `runtime-c/`; network functions load as shared objects "
    "([docs/nf.md](docs/nf.md)). Not yet: live capture, DPDK and multi-core, rules that drop "
    "or rewrite."
)


def test_the_checkers_catch_what_they_are_for(tmp_path: Path) -> None:
    listed = every_flag()
    old = missing_claims(OLD_STATUS, listed)
    assert {c.split(" is said")[0] for c in old} >= {
        "'live capture|live interface' (--iface)",
        "'\\bDPDK\\b' (--dpdk)",
        "'multi-?core|several cores|\\bworkers\\b' (--workers)",
        "'rules? (?:that )?(?:drop|rewrite)' (--rules)",
    }, old
    assert missing_claims("The `--summary full` flag is not yet there.", listed)
    assert not missing_claims("Not yet: a web front end.", listed)
    known = known_flags()
    assert unknown_flags("rubikgen run", "S C --no-such-flag", known) == ["--no-such-flag"]
    assert unknown_flags("rubikgen run", "S C --summary full -- --seed 1", known) == []
    inside = ROOT / "build" / f"doc-claims-probe-{tmp_path.name}.md"
    inside.parent.mkdir(exist_ok=True)
    inside.write_text(f"See [x](nowhere.md) and REQUIREMENTS.md, [ok]({inside.name}).\n")
    try:
        assert [b.split(": ", 1)[1] for b in missing_files(inside)] == [
            "link to nowhere.md: no such file",
            "names nowhere.md: no such file",
            "names REQUIREMENTS.md: no such file",
        ]
    finally:
        inside.unlink()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_shipped_is_called_missing(doc: Path) -> None:
    listed = every_flag()
    found = [f"{doc.name}:{n}: {c}" for n, t in _prose(doc) for c in missing_claims(t, listed)]
    assert found == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_flag_given_is_known(doc: Path) -> None:
    known = known_flags()
    found = [
        f"{doc.relative_to(ROOT)}:{n}: {cmd}: {flag} is not in its --help"
        for n, cmd, args in _commands(doc)
        for flag in unknown_flags(cmd, args, known)
    ]
    assert found == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_cited_exists(doc: Path) -> None:
    assert missing_files(doc) == []
