"""The documentation cannot drift from the code and the specs.

* docs/spec-language.md: every ```yaml and ```toml example validates. A complete document
  (first line that is not a comment starts with `protocol`/`stack`) is validated as it is; a
  fragment is merged into the base document named by the HTML comment before it,
  `<!-- check: demo|empty [expect RGnnn ...] -->` ("demo" is the reference's running example,
  "empty" is `protocol: example`), and must then validate without errors, or produce exactly
  the expected codes among its errors.
* docs/tutorial.md: docs/tutorial/trp.yaml and trp_stack.yaml validate with --strict; every
  ```yaml block (in particular each one starting with `protocol:` or `stack:`) is a contiguous
  excerpt of one of them; every ```text block starting with `$ rubikgen ...` shows that
  command's real output. A `<!-- mistake: FILE: "OLD" -> "NEW" -->` comment replaces OLD by
  NEW in FILE for the next ```yaml block (an excerpt of the changed file) and the next command.
  The reference's `$ rubikgen ...` blocks are checked the same way (on the tutorial's files).
  docs/tutorial/trp_stack-tree.svg shows every layer, edge condition and handler of the stack.
* docs/spec-loc.md is what `python ci/spec_loc.py --write` writes.
* README.md's complete protocol examples validate.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import REPO_ROOT

from rubikgen.front.workspace import Workspace

ROOT = REPO_ROOT
DOCS = ROOT / "docs"
REFERENCE = DOCS / "spec-language.md"
TUTORIAL = DOCS / "tutorial.md"
TUTORIAL_FILES = [
    DOCS / "tutorial" / "trp.yaml",
    DOCS / "tutorial" / "trp_stack.yaml",
    DOCS / "tutorial" / "tcp_ip_vxlan.yaml",
    DOCS / "tutorial" / "ftp_lines.yaml",
    DOCS / "tutorial" / "ftp_stack.yaml",
]


@dataclass
class Block:
    lang: str
    text: str
    line: int  # 1-based line of the opening fence
    marker: str  # the HTML comment on the line(s) before the fence, or ""

    @property
    def first(self) -> str:
        """First line that is neither blank nor a comment."""
        return next(
            (ln for ln in self.text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")),
            "",
        )

    @property
    def is_document(self) -> bool:
        return re.match(r"(protocol|stack)\s*[:=]", self.first) is not None


FENCE = re.compile(r"^```(\w*)\s*$")
COMMENT = re.compile(r"^<!--(.*)-->\s*$")


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        cm = COMMENT.match(lines[k].strip()) if k >= 0 else None
        out.append(
            Block(
                m.group(1),
                "\n".join(lines[i + 1 : j]) + "\n",
                i + 1,
                cm.group(1).strip() if cm else "",
            )
        )
        i = j + 1
    return out


def _ids(bs: list[Block]) -> list[str]:
    return [f"line{b.line}" for b in bs]


# ---------------------------------------------------------------------------------------
# docs/spec-language.md


REF_BLOCKS = (
    [b for b in blocks(REFERENCE) if b.lang in ("yaml", "toml")] if REFERENCE.exists() else []
)
MERGED = ("params", "layouts", "temp", "perm", "events")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """protocols/ holds the stock protocols and the reference's `demo`; stacks/ is beside it."""
    root = tmp_path_factory.mktemp("reference")
    shutil.copytree(ROOT / "specs" / "protocols", root / "protocols")
    shutil.copytree(ROOT / "specs" / "stacks", root / "stacks")  # bases to extend
    demo = next(b for b in REF_BLOCKS if b.first.startswith("protocol: demo"))
    (root / "protocols" / "demo.yaml").write_text(demo.text, encoding="utf-8")
    return root


def _bases() -> dict[str, dict]:
    demo = next(b for b in REF_BLOCKS if b.first.startswith("protocol: demo"))
    return {"demo": yaml.safe_load(demo.text), "empty": {"protocol": "example"}}


def _diagnose(path: Path) -> list:
    ws = Workspace()
    ws.check(str(path))
    return ws.all_diagnostics()


def test_reference_has_examples() -> None:
    assert len(REF_BLOCKS) >= 20


@pytest.mark.parametrize("block", REF_BLOCKS, ids=_ids(REF_BLOCKS))
def test_reference_example_validates(block: Block, sandbox: Path) -> None:
    m = (
        re.fullmatch(r"check:\s*(\w+)((?:\s+expect\s+RG\d{3})*)", block.marker)
        if block.marker
        else None
    )
    expect = set(re.findall(r"RG\d{3}", m.group(2))) if m else set()
    suffix = ".toml" if block.lang == "toml" else ".yaml"
    if block.is_document:
        text = block.text
        folder = "stacks" if block.first.startswith("stack") else "protocols"
    else:
        assert m is not None, (
            f"docs/spec-language.md line {block.line}: a fragment needs '<!-- check: demo|empty -->' before it"
        )
        base = _bases()[m.group(1)]
        frag = yaml.safe_load(block.text)
        doc = dict(base)
        for k, v in frag.items():
            doc[k] = {**doc.get(k, {}), **v} if k in MERGED and isinstance(v, dict) else v
        text = yaml.safe_dump(doc, sort_keys=False)
        folder = "protocols"
    path = sandbox / folder / f"example_{block.line}{suffix}"
    path.write_text(text, encoding="utf-8")
    diags = _diagnose(path)
    errors = {d.code for d in diags if d.severity == "error"}
    shown = "\n".join(
        f"{d.file}:{d.line}:{d.col}: {d.severity}[{d.code}] {d.message}" for d in diags
    )
    if expect:
        assert expect <= {d.code for d in diags} and errors <= expect, (
            f"line {block.line}:\n{text}\n{shown}"
        )
    else:
        assert not errors, (
            f"docs/spec-language.md line {block.line} does not validate:\n{text}\n{shown}"
        )


def test_readme_examples_validate(sandbox: Path) -> None:
    """README.md's complete protocol examples validate beside the stock protocols."""
    docs = [b for b in blocks(ROOT / "README.md") if b.lang == "yaml" and b.is_document]
    assert docs
    for b in docs:
        path = sandbox / "protocols" / f"readme_{b.line}.yaml"
        path.write_text(b.text, encoding="utf-8")
        errors = [d for d in _diagnose(path) if d.severity == "error"]
        assert not errors, f"README.md line {b.line}: {[d.message for d in errors]}"


# ---------------------------------------------------------------------------------------
# docs/tutorial.md


TUT_BLOCKS = blocks(TUTORIAL) if TUTORIAL.exists() else []
MISTAKE = re.compile(
    r'mistake:\s*(?P<file>[^:\s]+):\s*(?P<old>"(?:[^"\\]|\\.)*")\s*->\s*(?P<new>"(?:[^"\\]|\\.)*")'
)


def test_tutorial_files_validate_strict() -> None:
    for f in TUTORIAL_FILES:
        assert f.is_file(), f
    r = subprocess.run(
        [sys.executable, "-m", "rubikgen", "validate", "--strict", *map(str, TUTORIAL_FILES)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == f"{len(TUTORIAL_FILES)} spec files OK"


@dataclass
class Step:
    block: Block
    change: tuple[str, str, str] | None  # (file relative to the repository, old, new)


def _steps(bs: list[Block]) -> list[Step]:
    """Blocks to check, each with the mistake that applies to it."""
    out: list[Step] = []
    pending: dict[str, tuple[str, str, str]] = {}  # kind -> change still to apply
    for b in bs:
        m = MISTAKE.search(b.marker)
        if m:
            change = (m.group("file"), json.loads(m.group("old")), json.loads(m.group("new")))
            pending = {"yaml": change, "text": change}
        if b.lang == "yaml":
            out.append(Step(b, pending.pop("yaml", None)))
        elif b.lang == "text" and b.text.startswith("$ "):
            out.append(Step(b, pending.pop("text", None)))
            pending = {}  # a mistake ends with its command
    return out


STEPS = _steps(TUT_BLOCKS)
YAML_STEPS = [s for s in STEPS if s.block.lang == "yaml"]
CMD_STEPS = [s for s in STEPS if s.block.lang == "text"]
# The reference shows real output too: its commands run on the tutorial's files.
REF_CMD_STEPS = (
    [s for s in _steps(blocks(REFERENCE)) if s.block.lang == "text"] if REFERENCE.exists() else []
)


def _apply(change: tuple[str, str, str] | None, rel: str, text: str) -> str:
    if change is None or change[0] != rel:
        return text
    _, old, new = change
    assert text.count(old) == 1, f"the mistake's text {old!r} must occur exactly once in {rel}"
    return text.replace(old, new)


def _lines(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _is_excerpt(part: list[str], whole: list[str]) -> bool:
    n = len(part)
    return n > 0 and any(whole[i : i + n] == part for i in range(len(whole) - n + 1))


def test_tutorial_has_steps() -> None:
    assert len(YAML_STEPS) >= 8 and len(CMD_STEPS) >= 3
    starts = {s.block.first.split(":")[0] for s in YAML_STEPS}
    assert {"protocol", "stack"} <= starts


@pytest.mark.parametrize("step", YAML_STEPS, ids=_ids([s.block for s in YAML_STEPS]))
def test_tutorial_yaml_is_an_excerpt(step: Step) -> None:
    part = _lines(step.block.text)
    for f in TUTORIAL_FILES:
        rel = f.relative_to(ROOT).as_posix()
        if _is_excerpt(part, _lines(_apply(step.change, rel, f.read_text(encoding="utf-8")))):
            return
    what = "the changed file" if step.change else "docs/tutorial/trp.yaml or trp_stack.yaml"
    pytest.fail(
        f"docs/tutorial.md line {step.block.line}: this block is not an excerpt of {what}:\n{step.block.text}"
    )


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "FORCE_COLOR")}
    env["NO_COLOR"] = "1"
    return env


@pytest.mark.parametrize(
    "step",
    CMD_STEPS + REF_CMD_STEPS,
    ids=[f"tutorial-line{s.block.line}" for s in CMD_STEPS]
    + [f"reference-line{s.block.line}" for s in REF_CMD_STEPS],
)
def test_command_output(step: Step, tmp_path: Path) -> None:
    """Runs the command in a copy of specs/ and docs/tutorial/ and compares its output."""
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    shutil.copytree(DOCS / "tutorial", tmp_path / "docs" / "tutorial")
    if step.change is not None:
        target = tmp_path / step.change[0]
        target.write_text(
            _apply(step.change, step.change[0], target.read_text(encoding="utf-8")),
            encoding="utf-8",
        )
    command, *expected = step.block.text.splitlines()
    argv = shlex.split(command[2:])
    assert argv[0] == "rubikgen", command
    r = subprocess.run(
        [sys.executable, "-m", "rubikgen", *argv[1:]],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
    )
    got = _lines(r.stdout + r.stderr)
    assert got == _lines("\n".join(expected)), (
        f"docs line {step.block.line}: the output of '{command[2:]}' changed; it is now:\n"
        + "\n".join(got)
    )


def test_tutorial_tree_drawing_matches_the_stack() -> None:
    """The committed SVG shows every layer, edge condition and handler of trp_stack.yaml."""
    import html

    svg = html.unescape((DOCS / "tutorial" / "trp_stack-tree.svg").read_text(encoding="utf-8"))
    stack = yaml.safe_load(TUTORIAL_FILES[1].read_text(encoding="utf-8"))
    texts = set(re.findall(r"<text[^>]*>([^<]*)</text>", svg))
    want = (
        set(stack["layers"])
        | {e["when"] for e in stack["edges"]}
        | {f"{h}()" for h in stack["handlers"]}
    )
    assert want <= texts, (
        f"redraw docs/tutorial/trp_stack-tree.svg; missing: {sorted(want - texts)}"
    )


# ---------------------------------------------------------------------------------------
# docs/spec-loc.md


def _spec_loc():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("spec_loc", ROOT / "ci" / "spec_loc.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


def test_spec_loc_is_fresh() -> None:
    mod = _spec_loc()
    text = (DOCS / "spec-loc.md").read_text(encoding="utf-8")
    assert mod.refreshed(text) == text, (
        "docs/spec-loc.md is stale: run 'python ci/spec_loc.py --write'"
    )


def test_spec_loc_counts() -> None:
    mod = _spec_loc()
    c = mod.count(TUTORIAL_FILES[0])
    text = TUTORIAL_FILES[0].read_text(encoding="utf-8").splitlines()
    assert c.raw == len(text)
    assert c.nonblank == sum(1 for ln in text if ln.strip())
    assert c.code == sum(1 for ln in text if ln.strip() and not ln.lstrip().startswith("#"))
    assert 0 < c.doc < c.code


# ---------------------------------------------------------------------------------------------
# docs/tutorial.md, steps 12-13: build, run, fill in the handlers


CONSOLE = [b for b in TUT_BLOCKS if b.lang == "console"]


@pytest.fixture(scope="module")
def tutorial_run(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Block, Any]]:
    """Runs every ```console command of the tutorial in order, in one copy of the repository's
    specs/ and docs/tutorial/ (a build is reused by the next command, as a reader's would)."""
    root = tmp_path_factory.mktemp("tutorial")
    shutil.copytree(ROOT / "specs", root / "specs")
    shutil.copytree(DOCS / "tutorial", root / "docs" / "tutorial")
    out = []
    for b in CONSOLE:
        command = b.text.splitlines()[0]
        assert command.startswith("$ rubikgen "), command
        argv = shlex.split(command[2:])
        r = subprocess.run(
            [sys.executable, "-m", "rubikgen", *argv[1:]],
            capture_output=True,
            text=True,
            cwd=root,
            env=_env(),
        )
        out.append((b, r))
    return [*out, (Block("dir", str(root), 0, ""), None)]


def test_tutorial_builds_runs_and_fills_a_handler(tutorial_run: list[tuple[Block, Any]]) -> None:
    assert [b.text.split()[1:3] for b in CONSOLE] == [
        ["rubikgen", "build"],
        ["rubikgen", "run"],
    ], "the tutorial builds, then runs"
    *runs, (root_block, _) = tutorial_run
    root = Path(root_block.text)
    for b, r in runs:
        assert r.returncode == 0, f"docs line {b.line}: {r.stdout}{r.stderr}"
        shown = b.text.splitlines()[1:]
        # the handlers' lines come first; the summary after them is not shown
        got = r.stdout.splitlines()[: len(shown)]
        assert got == shown, f"docs line {b.line}: the output is now:\n{r.stdout}"
    # the filled-in handler file defines exactly the functions of the generated stub
    stub = (root / "build" / "trp_stack" / "trp_stack_handlers.c").read_text()
    mine = (DOCS / "tutorial" / "trp_handlers.c").read_text()
    protos = re.compile(r"^void \w+\(.*\)$", re.M)
    assert protos.findall(stub) and protos.findall(stub) == protos.findall(mine)
    # every C block is an excerpt of the stub or of the filled-in file
    for b in (b for b in TUT_BLOCKS if b.lang == "c"):
        part = _lines(b.text)
        assert _is_excerpt(part, _lines(stub)) or _is_excerpt(part, _lines(mine)), b.line


def test_tutorial_capture_is_what_its_script_writes(tmp_path: Path) -> None:
    script = DOCS / "tutorial" / "make_trp_pcap.py"
    shutil.copy(script, tmp_path / script.name)
    subprocess.run([sys.executable, str(tmp_path / script.name)], check=True, capture_output=True)
    assert (tmp_path / "trp.pcap").read_bytes() == (DOCS / "tutorial" / "trp.pcap").read_bytes()


def test_tutorial_vxlan_recipe_is_short() -> None:
    text = (DOCS / "tutorial" / "tcp_ip_vxlan.yaml").read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(lines) <= 15, "the 'add an encapsulation' recipe promises at most 15 lines"
