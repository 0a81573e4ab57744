"""`rubikgen ctl SOCKET rules info|reload R.yaml` (rules/reload.py)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TextIO

from rubikgen.diagnostics import Diagnostic

EXIT_OK, EXIT_ERRORS = 0, 1


def report_diags(diags: list[Diagnostic], stream: TextIO | None = None) -> None:
    """The rules file's diagnostics, rendered like `rubikgen validate` (file:line:col)."""
    from rubikgen.diagnostics import SourceCache, render

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
