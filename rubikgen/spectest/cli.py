"""The `rubikgen test` subcommand (hooked into rubikgen.cli)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    t = sub.add_parser("test", help="run spec test vectors (*.test.yaml)")
    t.add_argument(
        "paths",
        nargs="*",
        default=["specs"],
        help="test files, directories searched for *.test.yaml, or stack specs (the test "
        "files that name them); default: specs/",
    )
    t.add_argument(
        "--build-dir",
        default="build/spectest",
        help="where stacks are built, one directory per stack (default: build/spectest)",
    )
    t.add_argument("-v", "--verbose", action="store_true", help="name every case run")
    t.add_argument(
        "--sanitize",
        action="store_true",
        help="run the stacks built with AddressSanitizer and UBSan (any report fails the case)",
    )
    t.add_argument("--spec-path", action="append", default=[], metavar="DIR")


def command(args: argparse.Namespace) -> int:
    from rubikgen.spectest.runner import run

    return run(list(args.paths), Path(args.build_dir), verbose=args.verbose, sanitize=args.sanitize)
