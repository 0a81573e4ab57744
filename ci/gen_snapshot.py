"""Write the generated C of every stack the repository holds into a directory, so that a
back-end refactor can prove the output byte-identical (`diff -r BEFORE AFTER`).

    python3 ci/gen_snapshot.py OUT                 # stock, tutorial, bench and test stacks
    python3 ci/gen_snapshot.py OUT --tests tests/opt/test_opt.py ...   # and the stacks those
                                                   # test files generate (written in tmp)

For each stack file (specs/stacks, docs/tutorial, bench/specs, tests/specs) and each -O level
(0, 1, 2) it writes every file of `Compilation.generated` (S_gen.h, S_gen.c with the burst stage
and the lean walks, S_main.c), the handler stubs and the declarations (prototypes, signatures,
pkg-config libraries, unseen sequences, as JSON), and the optimised IR with each instruction's
resources (ir.txt; the lowered IR before any pass too, in STACK-lowered/); the rules files of docs/examples are compiled
into tcp_ip both fixed and reloadable, with ci/snapshot.rules.yaml (every path of the rules
back-ends), and ci/snapshot-xdp.rules.yaml into tcp_ip's XDP program (xdp.c). With `--tests`, pytest runs the named files in this
process with `Compilation.generated` wrapped, so every stack a test generates is written too
(keyed by its spec hash, which hashes the inputs' names and contents; pytest's --basetemp,
RG_SNAPSHOT_TMP, is written <TMP> in the snapshot, so two runs at once compare). Stacks with spec errors are listed in
errors.txt, not skipped silently."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
STACK_DIRS = ["specs/stacks", "docs/tutorial", "bench/specs", "tests/specs"]
RULES = ["docs/examples/middlebox.rules.yaml", "ci/snapshot.rules.yaml"]
RELOAD_RULES = ["docs/examples/middlebox.rules.yaml"]  # (clamp-mss is not reloadable)
# rules files whose XDP program (backend/ebpf) is written too (stateless rules only)
XDP_RULES = ["ci/snapshot-xdp.rules.yaml"]
# pytest's --basetemp for --tests (RG_SNAPSHOT_TMP): the tests' stack files are written there
BASETEMP = Path(os.environ.get("RG_SNAPSHOT_TMP", "/tmp/rg-gen-snapshot"))


def _stack_files() -> list[Path]:
    out = []
    for d in STACK_DIRS:
        for p in sorted((REPO / d).rglob("*")):
            if p.suffix not in (".yaml", ".yml", ".toml") or "errors" in p.parts:
                continue
            head = p.read_text(encoding="utf-8", errors="replace")
            if any(ln.startswith(("stack:", "stack =")) for ln in head.splitlines()):
                out.append(p)
    return out


def write(gen: Any, dest: Path, prog: Any = None) -> int:
    """The generated files of one compilation under dest (and its optimised IR with every
    instruction's effects, when given); returns the bytes written."""
    from rubikgen.ir.printer import to_text

    dest.mkdir(parents=True, exist_ok=True)
    files = dict(gen.files)
    if prog is not None:
        files["ir.txt"] = to_text(prog)
    files[gen.handlers_file] = gen.handlers_stub
    for name, text in gen.handler_stubs.items():
        files[f"stub_{name}.c"] = text
    meta = {
        "stack": gen.stack,
        "spec_hash": gen.spec_hash,
        "prototypes": gen.prototypes,
        "pkg_config": gen.pkg_config,
        "handler_sigs": {k: asdict(v) for k, v in gen.handler_sigs.items()},
        "unseen_sequences": gen.unseen_sequences,
    }
    files["meta.json"] = json.dumps(meta, indent=1, sort_keys=True, default=str) + "\n"
    n = 0
    for name, text in files.items():
        # the checkout's own path as a placeholder: a tree checked out elsewhere (the base of
        # a comparison) writes the same bytes
        text = text.replace(str(REPO), "<REPO>").replace(str(BASETEMP), "<TMP>")
        (dest / name).write_text(text, encoding="utf-8")
        n += len(text.encode())
    return n


def _xdp(comp: Any) -> str:
    """The XDP program of a compilation with rules (before the rules were lowered into the IR,
    generate_xdp took them as an argument: a snapshot of an older tree compares too)."""
    import inspect

    from rubikgen.backend.ebpf import generate_xdp

    if len(inspect.signature(generate_xdp).parameters) == 2:
        return generate_xdp(comp.program, comp.rules).c  # type: ignore[call-arg]
    return generate_xdp(comp.program).c


def snapshot_files(out: Path) -> tuple[int, int]:
    from rubikgen.backend.emit import GenerateError
    from rubikgen.pipeline import Compilation

    nfiles = nbytes = 0
    errors: list[str] = []
    jobs: list[tuple[Path, str | None, bool]] = [(p, None, False) for p in _stack_files()]
    for r in RULES:
        jobs += [(REPO / "specs/stacks/tcp_ip.yaml", r, False)]
        if r in RELOAD_RULES:
            jobs += [(REPO / "specs/stacks/tcp_ip.yaml", r, True)]
    for r in XDP_RULES:
        for level in (0, 1, 2):
            comp = Compilation(REPO / "specs/stacks/tcp_ip.yaml", opt_level=level, rules=REPO / r)
            dest = out / "files" / f"xdp+{Path(r).name}-O{level}"
            dest.mkdir(parents=True, exist_ok=True)
            text = _xdp(comp).replace(str(REPO), "<REPO>")
            (dest / "xdp.c").write_text(text, encoding="utf-8")
            nfiles, nbytes = nfiles + 1, nbytes + len(text.encode())
    for path, rules, reload in jobs:
        rel = path.relative_to(REPO)
        tag = str(rel).replace("/", "__")
        if rules is not None:
            tag += "+" + Path(rules).name + ("+reload" if reload else "")
        if rules is None:
            from rubikgen.ir.printer import to_text

            try:
                lowered = Compilation(path, opt_level=0).lowered
                d = out / "files" / f"{tag}-lowered"
                d.mkdir(parents=True, exist_ok=True)
                text = to_text(lowered).replace(str(REPO), "<REPO>")
                (d / "ir.txt").write_text(text, encoding="utf-8")
                nfiles, nbytes = nfiles + 1, nbytes + len(text.encode())
            except GenerateError as e:
                errors.append(f"{tag} lowered: {e}")
        for level in (0, 1, 2):
            comp = Compilation(
                path, opt_level=level, rules=REPO / rules if rules else None, rules_reload=reload
            )
            try:
                gen = comp.generated
            except GenerateError as e:
                errors.append(f"{tag} -O{level}: {e}")
                continue
            dest = out / "files" / f"{tag}-O{level}"
            nbytes += write(gen, dest, comp.program)
            nfiles += len(list(dest.iterdir()))
    (out / "errors.txt").write_text("".join(x + "\n" for x in errors), encoding="utf-8")
    return nfiles, nbytes


def snapshot_tests(out: Path, tests: list[str]) -> None:
    """Runs pytest on `tests` with every generated compilation written under out/tests."""
    import pytest

    from rubikgen import pipeline

    orig = pipeline.Compilation.__dict__["generated"]
    seen: dict[str, int] = {}

    def generated(self: Any) -> Any:
        gen = orig.func(self)
        level = self.options.opt_level
        key = f"{gen.stack}-{gen.spec_hash}-O{level}"
        if self.rules_path is not None:
            key += "-rules" + ("-reload" if self.rules_reload else "")
        if key not in seen:
            seen[key] = write(gen, out / "tests" / key, self.program)
        return gen

    from functools import cached_property

    cp = cached_property(generated)
    cp.attrname = "generated"
    pipeline.Compilation.generated = cp  # type: ignore[method-assign,assignment]
    rc = pytest.main(["-q", "-p", "no:cacheprovider", f"--basetemp={BASETEMP}", *tests])
    print(f"pytest exit {rc}; {len(seen)} compilations from tests", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--tests", nargs="*", default=[], help="test files whose stacks to add")
    a = ap.parse_args()
    os.chdir(REPO)  # stack paths in the generated comments are as the tests give them
    sys.path.insert(0, str(REPO))
    a.out.mkdir(parents=True, exist_ok=True)
    nfiles, nbytes = snapshot_files(a.out)
    print(f"{nfiles} files, {nbytes} bytes from the repository's stacks", file=sys.stderr)
    if a.tests:
        snapshot_tests(a.out.resolve(), a.tests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
