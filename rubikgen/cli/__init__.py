"""The command line: `rubikgen` and its subcommands."""

from rubikgen.cli.main import main as main
