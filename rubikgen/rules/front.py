"""`rubikgen validate` of rules files: each checked against the stack its `spec:` names
(`rubikgen build/run --rules` check against the stack being built: pipeline.py)."""

from __future__ import annotations

import os
from pathlib import Path

from rubikgen.front import specpath
from rubikgen.front.diagnostics import Diagnostic, SourceCache

from .check import StackFields, check, check_syntax, load


def validate(path: str, stack: str | None = None) -> tuple[list[Diagnostic], int]:
    """`rubikgen validate` of a rules file: the model, then (with `spec:`, or against `stack`
    when given: `validate STACK --rules R.yaml`) the rules against that stack. Returns the
    diagnostics and 1 (one file checked)."""
    from rubikgen.front.diagnostics import GenerateError
    from rubikgen.pipeline import Compilation

    loaded, diags = load(path)
    if loaded is None or any(d.severity == "error" for d in diags):
        return diags, 1
    if stack is not None:
        try:
            c = Compilation(stack, opt_level=0)
            sf = StackFields.of_model(c.stack_name, c.stack_info)
        except GenerateError as e:
            return diags + list(e.diagnostics), 1
        return diags + check(loaded, sf)[1], 1
    ref = loaded.data.get("spec")
    if ref is None:
        hint = "add `spec: STACK.yaml` so that the fields the rules name are checked"
        return diags + check_syntax(loaded) + [
            loaded.smap.diag(
                "RG004",
                "no `spec:`: the rules are not checked against a stack",
                (),
                severity="warning",
                hint=hint,
            )  # fmt: skip
        ], 1
    base = os.path.dirname(os.path.abspath(path))
    res = specpath.resolve(str(ref), base, specpath.STACK_ARGS)
    if res.path is None:
        return diags + [
            loaded.smap.diag(
                "RG007",
                f"stack '{ref}' {specpath.problem(res, 'stack file')}",
                ("spec",),
                hint=specpath.hint(str(ref), res, "the rules file", "stacks"),
            )  # fmt: skip
        ], 1
    comp = Compilation(res.path, opt_level=0)
    try:
        sf = StackFields.of_model(comp.stack_name, comp.stack_info)
    except GenerateError as e:
        return diags + list(e.diagnostics) + [
            loaded.smap.diag("RG007", f"the stack '{ref}' has errors", ("spec",))
        ], 1
    _rs, more = check(loaded, sf)
    return diags + more, 1


def validate_files(
    files: list[str], diags: list[Diagnostic], sources: SourceCache, stack: str | None = None
) -> int:
    """`rubikgen validate` of rules files (against `stack` when given): diagnostics appended,
    texts added to sources (for the source lines of the rendering); returns the number of
    files checked."""
    for f in files:
        got, _ = validate(f, stack)
        diags += got
        for name in {d.file for d in got}:
            try:
                sources.add(name, Path(name).read_text(encoding="utf-8", errors="replace"))
            except OSError:
                pass
    return len(files)
