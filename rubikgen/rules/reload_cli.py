"""`rubikgen ctl SOCKET rules info|reload R.yaml` (rules/reload.py)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from rubikgen.front.diagnostics import Diagnostic

EXIT_OK, EXIT_ERRORS = 0, 1


def report_diags(diags: list[Diagnostic], stream: TextIO | None = None) -> None:
    """The rules file's diagnostics, rendered like `rubikgen validate` (file:line:col)."""
    from rubikgen.front.diagnostics import SourceCache, render

    sources = SourceCache()
    for name in {d.file for d in diags}:
        try:
            sources.add(name, Path(name).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            pass
    render(diags, sources, "text", stream=stream or sys.stderr)


def rules_command(args: argparse.Namespace) -> int:
    from .reload import info, reload

    try:
        if args.rules_action == "info":
            for k, v in info(args.socket, args.timeout).items():
                sys.stdout.write(f"{k}\t{v}\n")
            return EXIT_OK
        path = os.path.abspath(args.rules_file)
        ok, text, diags = reload(args.socket, path, args.timeout, os.environ.get("CC") or "cc")
    except (OSError, RuntimeError) as e:
        sys.stderr.write(f"rubikgen: error: {args.socket}: {e}\n")
        return EXIT_ERRORS
    if diags:
        report_diags(diags)
    if not ok:
        sys.stderr.write(f"rubikgen: error: {text}\n")
        return EXIT_ERRORS
    sys.stdout.write(text)
    return EXIT_OK


def compile_for_run(stack: str, rules: str, build_dir: Path) -> Path | None:
    """`rubikgen run --rules R.yaml --rules-reload`: R.yaml compiled into a rule set for the
    binary's --rules-so (BUILD/rules/R.so, replaced atomically); None when it has errors
    (printed)."""
    from .reload import compile_so

    out = build_dir / "rules"
    tmp = Path(tempfile.mkdtemp(prefix=".rules-", dir=build_dir))
    try:
        c = compile_so(stack, os.path.abspath(rules), tmp, os.environ.get("CC") or "cc")
        if c.so is None:
            if c.diagnostics:
                report_diags(c.diagnostics)
            sys.stderr.write(f"rubikgen: error: {c.error}\n")
            return None
        out.mkdir(parents=True, exist_ok=True)
        so = out / (Path(rules).stem + ".so")
        os.replace(c.so, so)  # a SIGHUP'd binary reads either the old file or the new one
        return so
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def recompile_on_hup(stack: str, rules: str, build_dir: Path) -> Callable[[], bool]:
    """What a SIGHUP to `rubikgen run --rules-reload` does before it is passed on to the
    binary (which reloads --rules-so): recompile the rules file; False (not passed on) when
    it has errors, which are reported, the old set kept."""

    def on_hup() -> bool:
        sys.stderr.write(f"rubikgen: SIGHUP: recompiling {rules}\n")
        if compile_for_run(stack, rules, build_dir) is None:
            sys.stderr.write("rubikgen: SIGHUP: the rules in force are kept\n")
            return False
        return True

    return on_hup
