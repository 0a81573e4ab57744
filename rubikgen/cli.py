"""Command-line interface: rubikgen validate | schema | graph."""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from rubikgen import __version__
from rubikgen.diagnostics import CODES, Diagnostic, render

EXIT_OK, EXIT_ERRORS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors exit 2 with a short message
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rubikgen", description="Declarative protocol stacks compiled to C.")
    p.add_argument("--version", action="version", version=f"rubikgen {__version__}")
    sub = p.add_subparsers(dest="cmd", parser_class=_Parser)

    v = sub.add_parser("validate", help="check specs like a compiler")
    v.add_argument("paths", nargs="*", help="spec files or directories (default: specs/)")
    v.add_argument(
        "--format",
        choices=("text", "json", "github"),
        default=None,
        help="output format (default: text, or github under GitHub Actions)",
    )
    v.add_argument("--strict", action="store_true", help="warnings fail too")
    v.add_argument("--list-codes", action="store_true", help="print the diagnostic codes and exit")

    s = sub.add_parser("schema", help="write the JSON Schemas of the documents")
    s.add_argument("--out", default="schema", help="directory (default: schema/)")
    s.add_argument("--check", action="store_true", help="exit 1 if the files on disk are stale")

    g = sub.add_parser("graph", help="draw a stack's parse tree or a protocol's PSM (Graphviz)")
    g.add_argument("spec")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument(
        "--tree", action="store_true", help="the stack's parse tree (default for stacks)"
    )
    mode.add_argument(
        "--psm",
        metavar="LAYER",
        nargs="?",
        const="",
        help="the PSM of a protocol, or of a stack's layer",
    )
    g.add_argument("--format", choices=("dot", "svg"), default="dot")
    g.add_argument("-o", "--output", help="write here instead of standard output")
    return p


def cmd_validate(args: argparse.Namespace) -> int:
    from rubikgen.workspace import Workspace, expand_paths

    if args.list_codes:
        for code, title in CODES.items():
            print(f"{code}  {title}")
        return EXIT_OK
    paths = args.paths or ["specs"]
    fmt = args.format or ("github" if os.environ.get("GITHUB_ACTIONS") == "true" else "text")
    files, diags = expand_paths(paths)
    ws = Workspace()
    internal = False
    for f in files:
        try:
            ws.check(f)
        except Exception as e:  # never a traceback for a user: report it with the file
            internal = True
            tb = traceback.extract_tb(e.__traceback__)
            where = f"{tb[-1].filename}:{tb[-1].lineno}" if tb else "?"
            diags.append(
                Diagnostic(
                    "RG900",
                    f"internal error while checking this file: {type(e).__name__}: {e}",
                    f,
                    1,
                    1,
                    hint=f"this is a rubikgen bug (at {where}); please report it with the spec",
                )
            )
    diags = diags + ws.all_diagnostics()
    render(diags, ws.sources, fmt)
    if internal:
        return EXIT_INTERNAL
    errors = any(d.severity == "error" for d in diags)
    warnings = any(d.severity == "warning" for d in diags)
    if fmt == "text" and not diags:
        n = len(files)
        print(f"{n} spec file{'s' if n != 1 else ''} OK")
    return EXIT_ERRORS if errors or (args.strict and warnings) else EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    from rubikgen.schema_gen import write_schemas

    stale = write_schemas(args.out, check=args.check)
    if args.check:
        for f in stale:
            print(f"{f} is stale: run 'rubikgen schema --out {args.out}'", file=sys.stderr)
        return EXIT_ERRORS if stale else EXIT_OK
    return EXIT_OK


def cmd_graph(args: argparse.Namespace) -> int:
    from rubikgen.graph import graph_command

    return graph_command(args)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return {"validate": cmd_validate, "schema": cmd_schema, "graph": cmd_graph}[args.cmd](args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:
        sys.stderr.write(
            f"rubikgen: internal error: {type(e).__name__}: {e}\n(this is a rubikgen bug; please report it)\n"
        )
        if os.environ.get("RUBIKGEN_DEBUG"):
            traceback.print_exc()
        return EXIT_INTERNAL
