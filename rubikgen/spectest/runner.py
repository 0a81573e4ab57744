"""`rubikgen test`: run the test vectors of `*.test.yaml` files against their stacks.

For each file: validate it (positioned errors, like specs), build its stack once (build
directories are reused across runs: `rubikgen.toolchain.build.build` skips an up-to-date compile), and
for each case write the case's frames to a pcap, run the binary with the events, streams and
(when flows are expected) flowstats NFs, and compare with the expectations.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rubikgen.front import specpath
from rubikgen.front.diagnostics import Diagnostic, SourceCache, render_text
from rubikgen.front.source import SourceMap, load_yaml
from rubikgen.spectest import compare
from rubikgen.spectest.model import TestFile
from rubikgen.spectest.packets import PacketError, build_frames, write_pcap

SUFFIX = ".test.yaml"
RUN_TIMEOUT = 60  # seconds per binary run: a stack that loops forever fails the case


@dataclass
class Outcome:
    cases: int = 0
    failed: int = 0
    diags: list[Diagnostic] = field(default_factory=list)
    sources: SourceCache = field(default_factory=SourceCache)


def find_tests(arg: str) -> list[Path]:
    """Test files of an argument: a directory (searched), a test file, or a stack spec (the
    test files beside it and in a sibling tests/ directory that name it)."""
    p = Path(specpath.resolve_arg(arg))
    if p.is_dir():
        return sorted(p.rglob("*" + SUFFIX))
    if p.name.endswith(SUFFIX) or not p.is_file():
        return [p] if p.is_file() else []
    target = p.resolve()
    out = []
    where = [target.parent, target.parent.parent / "tests"]
    for t in sorted({t for d in where if d.is_dir() for t in d.glob("*" + SUFFIX)}):
        try:
            data = load_yaml(str(t), t.read_text(encoding="utf-8")).data
        except OSError:
            continue
        ref = data.get("spec") if isinstance(data, dict) else None
        found = specpath.resolve(str(ref), str(t.parent), specpath.STACK_ARGS).path if ref else None
        if found and Path(found).resolve() == target:
            out.append(t)
    return out


def render(d: Diagnostic, sources: SourceCache) -> str:
    """Like validate's text rendering; expectation failures carry no code."""
    text = render_text(d, sources)
    if d.code == "RGtest":
        head, _, rest = text.partition("\n")
        head = f"{d.file}:{d.line}:{d.col}: {d.severity}: {d.message}"
        text = head + ("\n" + rest if rest else "")
    return text


class Runner:
    def __init__(self, build_root: Path, verbose: bool = False, sanitize: bool = False) -> None:
        self.build_root = build_root
        self.verbose = verbose
        self.sanitize = sanitize
        self.binaries: dict[str, Path] = {}  # stack spec -> binary, built once per run

    def binary(self, stack: str) -> Path:
        from rubikgen.toolchain.build import build, stack_name

        if stack not in self.binaries:
            tag = hashlib.sha256(stack.encode()).hexdigest()[:8]
            out = self.build_root / f"{stack_name(stack)}-{tag}"
            cc = os.environ.get("CC") or "cc"
            res = build(stack, out, cc=cc, quiet=True, sanitize=self.sanitize)
            self.binaries[stack] = res.binary
        return self.binaries[stack]

    def run_file(self, file: Path, outcome: Outcome) -> None:
        name = str(file)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as e:
            outcome.diags.append(Diagnostic("RG007", f"cannot read: {e}", name, 1, 1))
            return
        outcome.sources.add(name, text)
        loaded = load_yaml(name, text)
        if loaded.diags:
            outcome.diags += loaded.diags
            return
        if not isinstance(loaded.data, dict):
            hint = "a test file is a mapping with test:, spec: and cases:"
            outcome.diags.append(
                loaded.smap.diag("RG006", "expected a mapping at the top level", (), hint=hint)
            )
            return
        from rubikgen.front.schema_errors import convert

        try:
            TestFile.model_validate(loaded.data)
        except ValidationError as e:
            outcome.diags += convert(e, loaded.data, loaded.smap, TestFile)
            return
        data, smap = loaded.data, loaded.smap
        res = specpath.resolve(data["spec"], str(file.parent), specpath.STACK_ARGS)
        if res.path is None:
            outcome.diags.append(
                smap.diag(
                    "RG007",
                    f"stack '{data['spec']}' not found",
                    ("spec",),
                    hint=f"looked for {', '.join(res.looked)}",
                )
            )
            return
        from rubikgen.front.diagnostics import GenerateError
        from rubikgen.toolchain.build import BuildError

        try:
            binary = self.binary(res.path)
        except GenerateError as e:
            outcome.diags += e.diagnostics
            for f in {d.file for d in e.diagnostics}:
                try:
                    outcome.sources.add(f, Path(f).read_text(encoding="utf-8"))
                except OSError:
                    pass
            outcome.diags.append(smap.diag("RGtest", "the stack has errors", ("spec",)))
            return
        except BuildError as e:
            outcome.diags.append(
                smap.diag("RGtest", f"building the stack failed: {e}\n{e.output}", ("spec",))
            )
            return
        for i, case in enumerate(data["cases"]):
            outcome.cases += 1
            before = len(outcome.diags)
            self.run_case(file, data, case, ("cases", i), binary, smap, outcome)
            failed = len(outcome.diags) > before
            outcome.failed += failed
            if self.verbose or failed:
                word = "FAIL" if failed else "ok"
                print(f"{word:4} {file}: {case['name']}", flush=True)

    def run_case(
        self,
        file: Path,
        data: dict[str, Any],
        case: dict[str, Any],
        path: tuple[str | int, ...],
        binary: Path,
        smap: SourceMap,
        outcome: Outcome,
    ) -> None:
        def err(message: str, where: tuple[str | int, ...], key: bool = False) -> None:
            outcome.diags.append(smap.diag("RGtest", message, where, key=key))

        link = case.get("link") or data.get("link") or "ethernet"
        try:
            frames = build_frames(case["packets"], link, file.parent, (*path, "packets"))
        except PacketError as e:
            outcome.diags.append(smap.diag("RGtest", str(e), e.path, key=e.key, hint=e.hint))
            return
        expect = case["expect"]
        with tempfile.TemporaryDirectory(prefix="rg-test-") as tmp:
            pcap = Path(tmp) / "case.pcap"
            write_pcap(frames, pcap)
            got: dict[str, Path] = {}
            nfs = ["events", "streams"] + (["flowstats"] if expect.get("flows") is not None else [])
            summary: dict[str, Any] = {}
            for nf in nfs:
                out = Path(tmp) / nf
                cmd = [str(binary), str(pcap), "--nf", nf, "--out", str(out), "--summary", "json"]
                try:
                    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
                except subprocess.TimeoutExpired:
                    err(f"{binary.name} did not finish within {RUN_TIMEOUT} s", path)
                    return
                if proc.returncode != 0:
                    err(
                        f"{binary.name} failed (exit status {proc.returncode}): "
                        f"{proc.stderr.strip()[-500:]}",
                        path,
                    )
                    return
                if nf == "events":
                    summary = json.loads(proc.stdout.strip().splitlines()[-1])
                got[nf] = out
            events = _jsonl(got["events"] / "events.jsonl")
            epath = (*path, "expect")
            if expect.get("calls") is not None:
                only = expect.get("handlers")
                made = [
                    e for e in events if "handler" in e and (only is None or e["handler"] in only)
                ]
                compare.calls(expect["calls"], made, (*epath, "calls"), err)
            if expect.get("gaps") is not None:
                compare.gaps(
                    expect["gaps"],
                    [e for e in events if e.get("event") == "gap"],
                    (*epath, "gaps"),
                    err,
                )
            if expect.get("streams") is not None:
                sdir = got["streams"]

                def data_of(line: dict[str, Any]) -> bytes:
                    return (sdir / line["file"]).read_bytes() if line.get("file") else b""

                compare.streams(
                    expect["streams"],
                    _jsonl(sdir / "flows.jsonl"),
                    data_of,
                    (*epath, "streams"),
                    err,
                )
            if expect.get("flows") is not None:
                compare.flows(
                    expect["flows"],
                    _jsonl(got["flowstats"] / "flowstats.jsonl"),
                    (*epath, "flows"),
                    err,
                )
            if expect.get("summary") is not None:
                compare.summary(expect["summary"], summary, (*epath, "summary"), err)


def _jsonl(file: Path) -> list[dict[str, Any]]:
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line]


def run(args: list[str], build_root: Path, verbose: bool = False, sanitize: bool = False) -> int:
    """Runs the test files of args; prints failures; 0 when all pass, 1 otherwise, 2 when
    there is nothing to run."""
    files: list[Path] = []
    for a in args:
        found = find_tests(a)
        if not found:
            why = "no test files (*" + SUFFIX + ")" if Path(a).exists() else "no such file"
            print(f"rubikgen: error: {a}: {why}", file=sys.stderr)
            return 2
        files += found
    outcome = Outcome()
    runner = Runner(build_root, verbose, sanitize)
    for f in dict.fromkeys(files):
        runner.run_file(f, outcome)
    for d in outcome.diags:
        print(render(d, outcome.sources))
    bad_files = sum(1 for d in outcome.diags if d.code != "RGtest")
    print(
        f"{len(files)} test file(s), {outcome.cases} case(s), {outcome.failed} failed"
        + (f", {bad_files} file error(s)" if bad_files else "")
    )
    return 1 if outcome.diags else 0
