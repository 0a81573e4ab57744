"""Command-line interface: rubikgen validate | schema | graph | build | run | check | stubs."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from rubikgen import __version__
from rubikgen.front import specpath
from rubikgen.front.diagnostics import CODES, Diagnostic, SourceCache, render
from rubikgen.front.specpath import resolve_arg

if TYPE_CHECKING:
    from rubikgen.cli.live import Progress
    from rubikgen.pipeline import Compilation
    from rubikgen.toolchain.handlercheck import Finding

EXIT_OK, EXIT_ERRORS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # usage errors exit 2 with a short message
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
    v.add_argument(
        "--rules",
        metavar="R.yaml",
        action="append",
        default=[],
        help="also check this rules file against the one STACK given (docs/rules.md)",
    )
    v.add_argument("--list-codes", action="store_true", help="print the diagnostic codes and exit")
    v.add_argument(
        "--list-kinds",
        action="store_true",
        help="print the document kinds validate recognises, and how, and exit",
    )
    v.add_argument(
        "--exclude",
        metavar="GLOB",
        action="append",
        default=[],
        help="skip files matching GLOB (relative path, path as given or file name; repeatable)",
    )
    v.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="name the files skipped as not rubikgen documents",
    )
    _spec_path(v)

    from rubikgen.spectest.cli import add_parser as add_test_parser

    add_test_parser(sub)

    from rubikgen.cli.chain import add_parser as add_ctl_parser

    add_ctl_parser(sub)

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
    _spec_path(g)

    b = sub.add_parser("build", help="compile a stack into a binary")
    b.add_argument("stack", help="stack spec file")
    b.add_argument("-o", "--out-dir", metavar="DIR", help="build directory (default: build/STACK)")
    _build_options(b)
    _spec_path(b)
    b.add_argument(
        "--cc", default=os.environ.get("CC") or "cc", help="C compiler (default: $CC or cc)"
    )
    b.add_argument("--cflags", default="", help='extra compiler flags, e.g. "-O3 -march=native"')
    _opt_level(b, 2, "generator optimisation level: -O0, -O1 or -O2 (default)")
    _pass_options(b)
    b.add_argument(
        "--dump-ir-after",
        metavar="PASS",
        action="append",
        default=[],
        help="also write the IR after this pass into DIR/STACK.PASS.ir (repeatable)",
    )
    b.add_argument(
        "--xdp",
        action="store_true",
        help="build the stack's XDP program instead (DIR/STACK_xdp.o, clang -target bpf; "
        "docs/xdp.md)",
    )

    r = sub.add_parser(
        "run",
        help="build a stack when stale, then run it on a capture, an interface or DPDK ports",
        epilog="Arguments after '--' go to the binary (see BINARY --help).",
    )
    r.add_argument("stack", help="stack spec file")
    r.add_argument(
        "capture", nargs="?", help="pcap or pcapng file ('-': standard input); or --iface/--dpdk"
    )
    _wire_options(r)
    r.add_argument(
        "--nf",
        metavar="NAME",
        default=None,
        help="network function: a name the binary's NF registry knows (streams, events, "
        "flowstats, sni; count and none: the summary only; BINARY --help lists them), or an "
        "NF's .so (default: flowstats, records of every flow; or count with --chain; "
        "streams, every payload byte, only when asked for)",
    )
    r.add_argument(
        "--out", metavar="DIR", help="output directory of the NF (default: out/STACK-CAPTURE)"
    )
    r.add_argument("--build-dir", metavar="DIR", help="build directory (default: build/STACK)")
    _inline_options(r)
    _build_options(r, run=True)
    _spec_path(r)
    r.add_argument(
        "--summary",
        choices=("text", "full", "json"),
        default="text",
        help="the summary at the end: text (a few lines; the default), full (with the "
        "per-layer tables) or json",
    )
    r.add_argument(
        "--community-id-seed",
        type=int,
        metavar="N",
        help="seed (0..65535, default 0) of the Community ID v1 on the flow records",
    )
    r.add_argument("--chain", metavar="FILE", help="a chain of NFs (validated first; docs/nf.md)")
    r.add_argument(
        "--control", metavar="SOCKET", help="a UNIX socket for `rubikgen ctl` (docs/nf.md)"
    )
    r.add_argument(
        "--control-mode",
        metavar="MODE",
        help="the control socket's mode, octal (default 0600; docs/operating.md)",
    )
    r.add_argument(
        "--control-group",
        metavar="GROUP",
        help="members of GROUP may use the control socket too (docs/operating.md)",
    )
    r.add_argument(
        "--nf-path",
        metavar="DIR",
        action="append",
        help="`ctl attach` loads .so files under DIR only (repeatable; default: the build's)",
    )
    r.add_argument(
        "--rules-path",
        metavar="DIR",
        action="append",
        help="`ctl rules reload` loads rule sets under DIR only (repeatable; default: the build's)",
    )
    r.add_argument(
        "--write", metavar="OUT.pcap", help="write the packets that pass (rules, verdicts) here"
    )
    r.add_argument("--checksums", action="store_true", help="verify and count bad checksums")
    r.add_argument(
        "--reject-rate",
        metavar="N",
        type=int,
        help="answer at most N rejected packets a second (default 100, 0: no limit)",
    )
    r.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (shown on a terminal for a capture file: docs/operating.md)",
    )
    _memcap_options(r)

    i = sub.add_parser("ir", help="print a stack's control-flow-graph IR (text or Graphviz)")
    i.add_argument("stack", help="stack spec file")
    i.add_argument("--layer", metavar="L", help="only the blocks of this layer")
    i.add_argument("--dot", action="store_true", help="Graphviz instead of text")
    i.add_argument("--no-effects", action="store_true", help="text without read/write sets")
    i.add_argument(
        "--rules", metavar="R.yaml", help="with this rules file lowered in (docs/rules.md)"
    )
    i.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    _opt_level(i, 0, "run the middle-end first: -O1 or -O2 (default -O0: the IR as lowered)")
    _pass_options(i)
    i.add_argument(
        "--dump-after",
        "--dump-ir-after",
        dest="dump_after",
        metavar="PASS",
        action="append",
        default=[],
        help="print the IR after this pass (repeatable) instead of the final IR",
    )
    i.add_argument("--list-passes", action="store_true", help="list the passes and exit")
    _spec_path(i)

    c = sub.add_parser("check", help="report stale generated files and mismatched handlers")
    c.add_argument("stack", help="stack spec file")
    c.add_argument("-o", "--out-dir", metavar="DIR", help="build directory (default: build/STACK)")
    c.add_argument(
        "--handlers", metavar="F.c", help="the handler file (default: DIR/STACK_handlers.c)"
    )
    c.add_argument(
        "--rules", metavar="R.yaml", help="the rules file the build has (checked against STACK)"
    )
    c.add_argument("--rules-reload", action="store_true", help="the build is --rules-reload")
    _spec_path(c)

    st = sub.add_parser(
        "stubs",
        help="write handler stubs: a fresh handler file, or --append those of new handlers",
    )
    st.add_argument("stack", help="stack spec file")
    where = st.add_mutually_exclusive_group()
    where.add_argument(
        "-o", "--out-dir", metavar="DIR", help="build directory (default: build/STACK)"
    )
    where.add_argument(
        "--handlers", metavar="F.c", help="the handler file (default: DIR/STACK_handlers.c)"
    )
    st.add_argument(
        "--append",
        action="store_true",
        help="add the stubs of handlers the file does not define; the rest stays byte for byte",
    )
    _spec_path(st)
    return p


def _spec_path(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--spec-path",
        metavar="DIR",
        action="append",
        default=[],
        help="also look for referenced spec files here (repeatable; then $RUBIKGEN_SPEC_PATH)",
    )


def _opt_level(p: argparse.ArgumentParser, default: int, help: str) -> None:
    p.add_argument(
        "-O", dest="opt_level", metavar="LEVEL", type=int, choices=(0, 1, 2), default=default,
        help=help,
    )  # fmt: skip


def _pass_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--disable-pass", metavar="PASS", action="append", default=[], help="skip a pass"
    )
    p.add_argument(
        "--timings", action="store_true", help="print the time of each compiler phase (stderr)"
    )
    p.add_argument(
        "--check-ir",
        action="store_true",
        help="run the IR verifier after every pass (always on for 'rubikgen ir'; "
        "also RUBIKGEN_CHECK_IR=1)",
    )


def _print_timings(t: dict[str, float]) -> None:
    for k, v in t.items():
        sys.stderr.write(f"rubikgen: {k:28} {v * 1000:8.1f} ms\n")
    sys.stderr.write(f"rubikgen: {'total':28} {sum(t.values()) * 1000:8.1f} ms\n")


def _inline_options(p: argparse.ArgumentParser) -> None:
    """`rubikgen run`'s inline mode: passed on to the binary, which checks them."""
    g = p.add_argument_group("inline mode (a live interface pair or DPDK port pairs)")
    g.add_argument(
        "--inline",
        action="store_true",
        help="forward every frame to the peer unless a verdict drops it (DPDK: ports 0<->1, "
        "2<->3...; live: --peer)",
    )
    g.add_argument("--peer", metavar="IF", help="live --inline: the second interface")


def _inline_args(args: argparse.Namespace) -> list[str]:
    return (["--inline"] if args.inline else []) + (["--peer", args.peer] if args.peer else [])


def _build_options(p: argparse.ArgumentParser, run: bool = False) -> None:
    p.add_argument(
        "--handlers",
        metavar="F.c",
        help="compile this handler file instead of DIR/STACK_handlers.c",
    )
    p.add_argument("--sanitize", action="store_true", help="ASan + UBSan build (binary STACK-asan)")
    p.add_argument(
        "--io",
        choices=("pcap", "dpdk", "all", "afxdp", "packet")
        if run
        else ("pcap", "dpdk", "all", "afxdp"),
        default="pcap",
        help="packet sources linked in: pcap (capture files, live interfaces; default), "
        "dpdk or all (also DPDK ports: needs libdpdk-dev), afxdp (also AF_XDP sockets: needs "
        "libxdp-dev"
        + ("; run --iface IF reads them, one socket per worker queue" if run else "")
        + ")"
        + (
            "; packet: the pcap build, --iface read through AF_PACKET TPACKET_V3 rings "
            "(one per worker, in a PACKET_FANOUT group; `-- --fanout l3`: see BINARY --help)"
            if run
            else ""
        ),
    )
    p.add_argument(
        "--trace",
        action="store_true",
        help="compile the packet trace in (-DRG_TRACE): `rubikgen ctl SOCKET trace N` "
        "(docs/operating.md)",
    )
    p.add_argument(
        "--rules", metavar="R.yaml", help="compile this rules file into the stack (docs/rules.md)"
    )
    p.add_argument(
        "--rules-reload",
        action="store_true",
        help="rule sets swappable at run time: `rubikgen ctl SOCKET rules reload R.yaml`, "
        "SIGHUP (docs/rules.md)",
    )


def _wire_options(p: argparse.ArgumentParser) -> None:
    """`rubikgen run`'s sources besides a capture file, and the multi-core options."""
    w = p.add_argument_group("live interfaces, DPDK ports, several cores")
    w.add_argument(
        "--iface",
        metavar="IF",
        help="capture live on this interface (libpcap; --io packet: AF_PACKET)",
    )
    w.add_argument("--bpf", metavar="EXPR", help="--iface: capture what this BPF filter matches")
    w.add_argument(
        "--dpdk",
        metavar="EAL_ARGS",
        help='read DPDK ports; the EAL arguments as one string, e.g. "-l 0-2 -a 0000:03:00.0" '
        "(builds with --io dpdk)",
    )
    w.add_argument(
        "--xdp",
        action="store_true",
        help="--iface: attach the stack's XDP program (built with it, docs/xdp.md) to the "
        "interface: the rules' drops in the kernel, flows given drop-flow or bypass verdicts "
        "dropped there (their counts read back into their records)",
    )
    w.add_argument(
        "--xdp-mode",
        choices=("auto", "generic", "native"),
        default="auto",
        help="--xdp, and --io afxdp's program: generic (skb) or native (driver) XDP; auto: "
        "native where the driver has it",
    )
    w.add_argument("--duration", metavar="S", type=int, help="stop after S seconds")
    w.add_argument("--count", metavar="N", type=int, help="stop after N frames")
    w.add_argument(
        "--workers",
        metavar="N",
        type=int,
        help="N stack contexts on N threads (DPDK: worker lcores, the EAL needs N + 1)",
    )


def _source_args(args: argparse.Namespace) -> tuple[list[str], list[str], str] | str:
    """The binary's source arguments, the EAL arguments (after its '--') and the name of the
    default output; or a usage error."""
    given = [x for x in (args.capture, args.iface, args.dpdk) if x is not None]
    if len(given) != 1:
        return "name one source: a CAPTURE file, --iface IF or --dpdk EAL_ARGS"
    if args.bpf is not None and args.iface is None:
        return "--bpf applies to --iface"
    if args.io in ("packet", "afxdp") and args.iface is None:
        return f"--io {args.io} reads an interface: name it with --iface IF"
    if args.xdp and args.iface is None:
        return "--xdp attaches to the capture interface: name it with --iface IF"
    for opt in ("duration", "count", "workers"):
        v = getattr(args, opt)
        if v is not None and v < 1:
            return f"--{opt} wants a positive number"
    extra: list[str] = []
    if args.duration is not None:
        extra += ["--duration", str(args.duration)]
    if args.count is not None:
        extra += ["--count", str(args.count)]
    if args.workers is not None:
        extra += ["--workers", str(args.workers)]
    if args.iface is not None:
        # --io packet: AF_PACKET rings instead of libpcap (both in the pcap build); afxdp:
        # AF_XDP sockets (the afxdp build)
        io = args.io if args.io in ("packet", "afxdp") else "live"
        src = ["--io", io, "--iface", args.iface]
        if io == "afxdp" and not args.xdp:  # the mode of the AF_XDP source's own program
            src += ["--xdp-mode", args.xdp_mode]
        if args.bpf is not None:
            src += ["--filter", args.bpf]
        return [*src, *extra], [], args.iface
    if args.dpdk is not None:
        try:
            eal = shlex.split(args.dpdk)
        except ValueError as e:
            return f"--dpdk: {e}"
        return ["--io", "dpdk", *extra], [*eal, *_default_lcores(eal, args.workers)], "dpdk"
    capture = Path(args.capture)
    return [str(capture), *extra], [], "stdin" if args.capture == "-" else capture.stem


LCORE_OPTS = ("-l", "-c", "--lcores", "--lcore", "--lcore-list")


def _default_lcores(eal: list[str], workers: int | None) -> list[str]:
    """EAL arguments giving the main lcore and each worker one (`--workers N` wants N + 1)
    when the user named no lcores: one per allowed core when there are enough, else all of
    them floating over the allowed cores (threads share cores: slower, never refused)."""
    if not workers or any(a.split("=")[0] in LCORE_OPTS or a[:2] in ("-l", "-c") for a in eal):
        return []
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > workers:
        return ["-l", ",".join(str(c) for c in cpus[: workers + 1])]
    return ["--lcores", f"(0-{workers})@({','.join(str(c) for c in cpus)})"]


def _internal_error(e: BaseException, file: str) -> Diagnostic:
    """RG900 for a genuine internal error; RG901 when a module of rubikgen (or a dependency)
    cannot be imported, which means a broken installation, not a bug to report."""
    if isinstance(e, ImportError):
        return Diagnostic(
            "RG901",
            f"rubikgen's installation looks broken: {_import_problem(e)}",
            file,
            1,
            1,
            hint="reinstall rubikgen (pip install --force-reinstall rubikgen, "
            "or 'pre-commit clean' for the pre-commit hook)",
        )
    tb = traceback.extract_tb(e.__traceback__)
    where = f"{tb[-1].filename}:{tb[-1].lineno}" if tb else "?"
    return Diagnostic(
        "RG900",
        f"internal error while checking this file: {type(e).__name__}: {e}",
        file,
        1,
        1,
        hint=f"this is a rubikgen bug (at {where}); please report it with the spec",
    )


def _import_problem(e: ImportError) -> str:
    name = getattr(e, "name", None)
    return f"cannot import module '{name}' ({type(e).__name__}: {e})" if name else str(e)


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        import rubikgen.front.chain  # noqa: F401  (what check_paths imports: a broken install shows here)
        import rubikgen.rules.front  # noqa: F401
        from rubikgen.front.validate import KINDS, check_paths, excluded, strict_skips
        from rubikgen.front.workspace import expand_paths
    except ImportError as e:  # a module missing from the installation: RG901, not a bug
        fmt = args.format or ("github" if os.environ.get("GITHUB_ACTIONS") == "true" else "text")
        render([_internal_error(e, (args.paths or ["specs"])[0])], SourceCache(), fmt)
        return EXIT_INTERNAL

    if args.list_codes:
        for code, title in CODES.items():
            print(f"{code}  {title}")
        return EXIT_OK
    if args.list_kinds:
        for kind, how in KINDS:
            print(f"{kind:9} {how}")
        print("Any other YAML/TOML file that parses to a mapping is skipped (named with -v); "
              "one that does not parse is an error.")  # fmt: skip
        return EXIT_OK
    paths = [resolve_arg(p) for p in args.paths] or ["specs"]
    fmt = args.format or ("github" if os.environ.get("GITHUB_ACTIONS") == "true" else "text")
    # references may not leave a validated folder that is in no git repository (specpath.py)
    specpath.configure_trees([p for p in paths if os.path.isdir(p)])
    files, diags = expand_paths(paths)
    files = [f for f in files if not excluded(f, args.exclude)]

    def skipped_note(f: str) -> None:
        if args.verbose:
            print(f"{f}: note: skipped: not a rubikgen document (see --list-kinds)",
                  file=sys.stderr)  # fmt: skip

    res = check_paths(files, on_skip=skipped_note)
    checked, skipped, internal = res.checked, len(res.skipped), bool(res.failures)
    diags += [_internal_error(e, f) for f, e in res.failures]
    diags += res.diags
    if args.strict:
        diags += strict_skips(res)
    if args.rules:  # `validate STACK --rules R.yaml`: the rules against that stack
        from rubikgen.rules.front import validate_files

        if len(paths) != 1 or not os.path.isfile(paths[0]):
            sys.stderr.write("rubikgen: error: --rules checks rules against one STACK file\n")
            return EXIT_USAGE
        checked += validate_files(args.rules, diags, res.workspace.sources, paths[0])
    diags.sort(key=lambda d: (d.file, d.line, d.col, d.code))
    render(diags, res.workspace.sources, fmt)
    if internal:
        return EXIT_INTERNAL
    errors = any(d.severity == "error" for d in diags)
    warnings = any(d.severity == "warning" for d in diags)
    if fmt == "text" and not diags:
        other = f" ({skipped} other YAML/TOML file{'s' if skipped != 1 else ''} skipped)"
        print(f"{checked} spec file{'s' if checked != 1 else ''} OK{other if skipped else ''}")
    return EXIT_ERRORS if errors or (args.strict and warnings) else EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    from rubikgen.front.schema_gen import write_schemas

    stale = write_schemas(args.out, check=args.check)
    if args.check:
        for f in stale:
            print(f"{f} is stale: run 'rubikgen schema --out {args.out}'", file=sys.stderr)
        return EXIT_ERRORS if stale else EXIT_OK
    return EXIT_OK


def cmd_graph(args: argparse.Namespace) -> int:
    from rubikgen.cli.graph import graph_command

    return graph_command(args)


def _render_spec_errors(diagnostics: list[Diagnostic]) -> None:
    """Spec errors found while generating, rendered like `rubikgen validate` (on stderr)."""
    sources = SourceCache()
    for f in {d.file for d in diagnostics}:
        try:
            sources.add(f, Path(f).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            pass
    render(diagnostics, sources, "text", stream=sys.stderr)


def _build_dir(comp: Compilation, given: str | None) -> Path:
    return Path(given) if given else Path("build") / comp.stack_name


def _run_build_dir(comp: Compilation, args: argparse.Namespace) -> Path:
    """`rubikgen run`'s build directory: build/STACK for the plain build, a directory of its
    own for each variant (another packet I/O, a rules file, reloadable rules, the packet
    trace), so that runs of different variants do not rebuild each other's binary."""
    if args.build_dir:
        return Path(args.build_dir)
    tags = [args.io] if args.io != "pcap" else []
    if args.rules:
        key = hashlib.sha1(str(Path(args.rules).resolve()).encode()).hexdigest()[:8]
        tags.append(f"rules-{Path(args.rules).stem.split('.')[0]}-{key}")
    if args.rules_reload:
        tags.append("reload")
    if args.trace:
        tags.append("trace")
    return Path("build") / "-".join([comp.stack_name, *tags])


def cmd_ir(args: argparse.Namespace) -> int:
    from rubikgen.front.diagnostics import GenerateError
    from rubikgen.ir import to_dot, to_text
    from rubikgen.opt import PassError, describe
    from rubikgen.pipeline import Compilation

    if args.list_passes:
        print(describe())
        return EXIT_OK
    comp = Compilation(
        args.stack,
        opt_level=args.opt_level,
        disable=args.disable_pass,
        dump_after=args.dump_after,
        check_ir=True,
        rules=args.rules,
    )
    try:
        _ = comp.lowered
    except GenerateError as e:
        _render_spec_errors(e.diagnostics)
        return EXIT_ERRORS
    try:
        res = comp.optimised
    except PassError as e:
        sys.stderr.write(f"rubikgen: error: {e}\n")
        return EXIT_USAGE
    prog = comp.program
    if args.timings:
        _print_timings(comp.timings)
    if args.layer is not None and args.layer not in prog.layers:
        known = ", ".join(prog.layers)
        sys.stderr.write(
            f"rubikgen: error: no layer '{args.layer}' in the stack (layers: {known})\n"
        )
        return EXIT_USAGE
    if args.dump_after:
        missing = [p for p in args.dump_after if p not in res.dumps]
        if missing:
            sys.stderr.write(
                f"rubikgen: note: not run at -O{args.opt_level}: {', '.join(missing)}\n"
            )
        text = "".join(f"; after pass {name}\n{txt}" for name, txt in res.dumps.items())
    elif args.dot:
        text = to_dot(prog, args.layer)
    else:
        text = to_text(prog, args.layer, effects=not args.no_effects)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_build(args: argparse.Namespace) -> int:
    import time

    from rubikgen.front.diagnostics import GenerateError
    from rubikgen.opt import PassError, check_names
    from rubikgen.pipeline import Compilation
    from rubikgen.toolchain.build import BuildError, HandlerError, build_compilation

    try:
        check_names(args.disable_pass + args.dump_ir_after)
    except PassError as e:
        sys.stderr.write(f"rubikgen: error: {e}\n")
        return EXIT_USAGE
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    comp = Compilation(
        args.stack,
        opt_level=args.opt_level,
        disable=args.disable_pass,
        dump_after=args.dump_ir_after,
        check_ir=args.check_ir or None,  # else RUBIKGEN_CHECK_IR decides
        timings=timings,
        rules=args.rules,
        rules_reload=args.rules_reload,
    )
    out_dir = _build_dir(comp, args.out_dir)
    if args.xdp:
        return _build_xdp(comp, out_dir)
    try:
        res = build_compilation(
            comp,
            out_dir,
            handlers=Path(args.handlers) if args.handlers else None,
            cc=args.cc,
            cflags=[*(["-DRG_TRACE"] if args.trace else []), *shlex.split(args.cflags)],
            sanitize=args.sanitize,
            io=args.io,
            report=_print_findings,
        )
    except GenerateError as e:
        _render_spec_errors(e.diagnostics)
        return EXIT_ERRORS
    except HandlerError as e:  # its findings are printed already
        sys.stderr.write(f"rubikgen: error: {e.message}\n")
        return EXIT_ERRORS
    except BuildError as e:
        sys.stderr.write(f"rubikgen: error: {e}\n")
        return EXIT_ERRORS
    except PassError as e:  # the IR verifier (--check-ir) found a pass's output invalid
        sys.stderr.write(f"rubikgen: error: {e}\n")
        return EXIT_INTERNAL
    _write_ir_dumps(args, comp, out_dir)
    if args.timings:
        timings["C compile (cached)" if not res.rebuilt else "C compile"] = (
            time.perf_counter() - t0 - sum(timings.values())
        )
        _print_timings(timings)
    if not res.rebuilt:
        print(f"rubikgen: {res.binary} is up to date", file=sys.stderr)
    print(res.binary)
    return EXIT_OK


def _xdp_run_args(comp: Compilation, out_dir: Path, args: argparse.Namespace) -> list[str]:
    """run --xdp: the stack's XDP program built beside the binary (toolchain/xdp.py; RG080 as
    GenerateError, a clang failure as BuildError), and the binary's options for it."""
    from rubikgen.toolchain.build import BuildError
    from rubikgen.toolchain.xdp import XdpBuildError, build_xdp

    try:
        obj = build_xdp(comp, out_dir)
    except XdpBuildError as e:
        raise BuildError(str(e)) from None
    meta = json.loads(obj.with_suffix(".json").read_text(encoding="utf-8"))
    flows = ",".join(sorted(meta.get("flow_layers", {})))
    return ["--xdp", str(obj), "--xdp-mode", args.xdp_mode, "--xdp-flows", flows]


def _build_xdp(comp: Compilation, out_dir: Path) -> int:
    """build --xdp: the XDP program (rubikgen/toolchain/xdp.py)."""
    from rubikgen.front.diagnostics import GenerateError
    from rubikgen.toolchain.xdp import XdpBuildError, build_xdp

    try:
        obj = build_xdp(comp, out_dir)
    except GenerateError as e:
        _render_spec_errors(e.diagnostics)
        return EXIT_ERRORS
    except XdpBuildError as e:
        sys.stderr.write(f"rubikgen: error: {e}\n")
        return EXIT_ERRORS
    print(obj)
    return EXIT_OK


def _write_ir_dumps(args: argparse.Namespace, comp: Compilation, out_dir: Path) -> None:
    """--dump-ir-after: the IR after each pass asked for, in DIR/STACK.PASS.ir."""
    dumps = comp.generated.dumps
    for name in args.dump_ir_after:
        if name not in dumps:
            sys.stderr.write(f"rubikgen: note: not run at -O{args.opt_level}: {name}\n")
            continue
        path = out_dir / f"{comp.stack_name}.{name}.ir"
        path.write_text(dumps[name], encoding="utf-8")
        sys.stderr.write(f"rubikgen: IR after pass {name}: {path}\n")


def _print_findings(findings: Sequence[Finding]) -> None:
    """The handler check's findings, on stderr before any compiler output."""
    for f in findings:
        sys.stderr.write(f"{f}\n")
    sys.stderr.flush()


def _warn_unseen_sequences(layers: Sequence[tuple[str, str]]) -> None:
    """The streams NF records the `data` arguments of handler calls: a layer whose reassembled
    data neither a child layer nor such a handler takes would be missing without a word."""
    for layer, where in layers:
        sys.stderr.write(
            f"{where}: warning: layer '{layer}' reassembles a sequence but nothing takes its data "
            "(no child layer, no handler with a 'data' argument): --nf streams records none of "
            f"its flows; add a handler such as `{layer}_data: {{layer: {layer}, "
            "args: {data: sdu}}`\n"
        )


def _exit_status(returncode: int) -> int:
    """A child's exit status as a shell reports it (128 + N when killed by signal N)."""
    return 128 - returncode if returncode < 0 else returncode


def _control_args(args: argparse.Namespace) -> list[str]:
    """The control socket's access options, passed on to the binary (rg_ctlsec.h)."""
    out: list[str] = []
    for opt in ("control_mode", "control_group"):
        if getattr(args, opt) is not None:
            out += [f"--{opt.replace('_', '-')}", getattr(args, opt)]
    for opt in ("nf_path", "rules_path"):
        for d in getattr(args, opt) or []:
            out += [f"--{opt.replace('_', '-')}", d]
    return out


FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _run_forwarding(
    cmd: list[str], on_hup: Callable[[], bool] | None = None, progress: Progress | None = None
) -> int:
    """Run the binary, passing SIGINT, SIGTERM and SIGHUP sent to this process on to it (a
    supervisor, `timeout` or `kill` stop the binary, which flushes its records); its
    returncode.  A Ctrl-C at a terminal reaches both already: the forwarded copy is one
    more SIGINT, which the binary takes as the same request to stop.  on_hup runs first on a
    SIGHUP and says whether to pass it on.  progress: the bar fed by the binary's --stats-fd."""
    proc = subprocess.Popen(cmd, pass_fds=(progress.wfd,) if progress else ())
    if progress:
        progress.start()

    def forward(sig: int, _frame: object) -> None:
        if sig == signal.SIGHUP and on_hup is not None and not on_hup():
            return
        if proc.poll() is None:
            proc.send_signal(sig)

    old = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # not expected: SIGINT is forwarded
                continue
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def cmd_run(args: argparse.Namespace) -> int:
    from rubikgen.front.diagnostics import GenerateError
    from rubikgen.pipeline import Compilation
    from rubikgen.toolchain.build import BuildError, HandlerError, build_compilation

    source = _source_args(args)
    if isinstance(source, str):
        sys.stderr.write(f"rubikgen run: error: {source}\n")
        return EXIT_USAGE
    src_args, eal, stem = source
    args.extra = [*_inline_args(args), *args.extra]  # before a '--' the extra may hold
    capture = Path(args.capture or "-")
    # '-': standard input; a FIFO: input paced by its writer
    if args.capture not in (None, "-") and not (capture.is_file() or capture.is_fifo()):
        what = "is a directory, not a capture file" if capture.is_dir() else "no such capture file"
        sys.stderr.write(f"rubikgen: error: {capture}: {what}\n")
        return EXIT_ERRORS
    if args.dpdk is not None and args.io == "pcap":
        args.io = "dpdk"  # the DPDK source must be linked in
    if args.io == "packet":
        args.io = "pcap"  # the packet source is in every build
    if args.chain:
        from rubikgen.front.chain import check_chain_file

        sources = SourceCache()
        chain_diags = check_chain_file(args.chain, sources).diags
        if chain_diags:
            render(chain_diags, sources, "text", stream=sys.stderr)
            if any(d.severity == "error" for d in chain_diags):
                return EXIT_ERRORS
    # --rules-reload: the rules run from a shared object the binary reloads on SIGHUP
    so_rules = args.rules if args.rules_reload else None
    comp = Compilation(
        args.stack, rules=None if so_rules else args.rules, rules_reload=args.rules_reload
    )
    try:
        res = build_compilation(
            comp,
            _run_build_dir(comp, args),
            handlers=Path(args.handlers) if args.handlers else None,
            cc=os.environ.get("CC") or "cc",
            cflags=["-DRG_TRACE"] if args.trace else [],
            sanitize=args.sanitize,
            io=args.io,
            quiet=True,
            report=_print_findings,
            xdp=args.xdp,
        )
        xdp_args = _xdp_run_args(comp, res.binary.parent, args) if args.xdp else []
    except GenerateError as e:
        _render_spec_errors(e.diagnostics)
        return EXIT_ERRORS
    except HandlerError as e:  # its findings are printed already
        sys.stderr.write(f"rubikgen: error: {e.message}\n")
        return EXIT_ERRORS
    except BuildError as e:
        sys.stderr.write(f"rubikgen: error: {e}\n")
        return EXIT_ERRORS
    if res.rebuilt:
        sys.stderr.write(f"rubikgen: rebuilt {res.binary}: {res.command}\n")
    if args.nf is None:
        # records, not payload: every payload byte (streams) only when asked for
        args.nf = "count" if args.chain else "flowstats"
    if args.nf == "streams":
        _warn_unseen_sequences(res.generated.unseen_sequences)
    out = Path(args.out) if args.out else Path("out") / f"{comp.stack_name}-{stem}"
    cmd = [str(res.binary), *src_args, "--nf", args.nf, "--out", str(out)]
    cmd += ["--chain", args.chain] if args.chain else []
    cmd += ["--control", args.control] if args.control else []
    cmd += _control_args(args)
    cmd += ["--summary", args.summary, *(["--checksums"] if args.checksums else [])]
    cmd += _memcap_args(args)
    if args.community_id_seed is not None:
        cmd += ["--community-id-seed", str(args.community_id_seed)]
    cmd += [*(["--write", args.write] if args.write else [])]
    cmd += [*(["--reject-rate", str(args.reject_rate)] if args.reject_rate is not None else [])]
    cmd += xdp_args
    cmd += args.extra
    if so_rules:
        from rubikgen.rules.reload_cli import compile_for_run, recompile_on_hup

        so = compile_for_run(args.stack, so_rules, res.binary.parent)
        if so is None:
            return EXIT_ERRORS
        cmd += ["--rules-so", str(so)]
    from rubikgen.cli.live import start_progress

    progress = start_progress(args.capture, args.quiet, cmd) if not eal else None
    if eal:
        cmd += ["--", *eal]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        hup = recompile_on_hup(args.stack, so_rules, res.binary.parent) if so_rules else None
        rc = _run_forwarding(cmd, hup, progress)
        if progress:
            progress.join()
    except OSError as e:
        sys.stderr.write(f"rubikgen: error: cannot run {res.binary}: {e}\n")
        return EXIT_ERRORS
    if rc < 0:
        name = signal.Signals(-rc).name
        sys.stderr.write(f"rubikgen: {res.binary} was killed by {name}\n")
    return _exit_status(rc)


def cmd_check(args: argparse.Namespace) -> int:
    from rubikgen.front.diagnostics import GenerateError
    from rubikgen.pipeline import Compilation
    from rubikgen.toolchain.build import check

    comp = Compilation(args.stack, rules=args.rules, rules_reload=args.rules_reload)
    out = _build_dir(comp, args.out_dir)
    try:
        hfile = Path(args.handlers) if args.handlers else None
        problems = check(args.stack, out, handlers=hfile, compilation=comp)
    except GenerateError as e:
        _render_spec_errors(e.diagnostics)
        return EXIT_ERRORS
    for p in problems:
        print(p)
    if not problems:
        print(f"{out}: up to date with {args.stack}")
    return EXIT_ERRORS if problems else EXIT_OK


def cmd_stubs(args: argparse.Namespace) -> int:
    from rubikgen.front.diagnostics import GenerateError
    from rubikgen.pipeline import Compilation
    from rubikgen.toolchain.csource import function_definitions
    from rubikgen.toolchain.handlercheck import header_sigs, renames

    comp = Compilation(args.stack)
    try:
        gen = comp.generated
    except GenerateError as e:
        _render_spec_errors(e.diagnostics)
        return EXIT_ERRORS
    out = _build_dir(comp, args.out_dir)
    hfile = Path(args.handlers) if args.handlers else out / gen.handlers_file
    if not hfile.exists():
        hfile.parent.mkdir(parents=True, exist_ok=True)
        hfile.write_text(gen.handlers_stub, encoding="utf-8")
        print(f"{hfile}: written, with stubs of {len(gen.handler_stubs)} handler(s)")
        return EXIT_OK
    if not args.append:
        sys.stderr.write(
            f"rubikgen: error: {hfile} exists (it is yours; nothing written): "
            "add --append to add the stubs of the handlers it does not define\n"
        )
        return EXIT_ERRORS
    data = hfile.read_bytes()
    defs = {d.name for d in function_definitions(data.decode("utf-8", errors="replace"))}
    new = [n for n in gen.handler_stubs if n not in defs]
    if not new:
        print(f"{hfile}: defines every handler of the stack; nothing to add")
        return EXIT_OK
    # one blank line before each stub, as in a fresh file
    sep = "" if data.endswith(b"\n\n") or not data else "\n" if data.endswith(b"\n") else "\n\n"
    text = sep + "\n".join(gen.handler_stubs[n] for n in new) + "\n"
    with open(hfile, "ab") as f:  # the existing bytes stay as they are
        f.write(text.encode())
    print(f"{hfile}: added stubs of {', '.join(new)}")
    header = out / f"{gen.stack}_gen.h"  # the last build's: the arguments of old handlers
    old = header_sigs(header.read_text(encoding="utf-8")) if header.is_file() else {}
    gone = {d: old.get(d) for d in defs if d not in gen.handler_sigs and d in old}
    for was, to in renames(gone, {n: gen.handler_sigs[n] for n in new}).items():
        print(
            f"{hfile}: note: '{was}' looks like the old name of '{to}': move its body into the new stub and delete it"
        )
    return EXIT_OK


def _size(text: str) -> str:
    """A memcap size as the binary takes it (64M, 1G, bytes; 0 = none)."""
    import re

    from rubikgen.models.stack import SIZE_PATTERN

    if not re.match(SIZE_PATTERN, text.upper()):
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (bytes, or e.g. 64K, 64M, 1G)")
    return text


def _memcap_options(p: argparse.ArgumentParser) -> None:
    """Memory caps per worker (docs/reliability.md), passed on to the binary."""
    p.add_argument("--memcap", type=_size, metavar="SIZE", help="reassembly + flows cap")
    p.add_argument("--memcap-reassembly", type=_size, metavar="SIZE")
    p.add_argument("--memcap-flows", type=_size, metavar="SIZE")
    p.add_argument("--memcap-policy", choices=("drop-flow", "evict-oldest", "bypass", "ignore"))


def _memcap_args(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    for opt in ("memcap", "memcap_reassembly", "memcap_flows", "memcap_policy"):
        v = getattr(args, opt, None)
        if v is not None:
            out += ["--" + opt.replace("_", "-"), v]
    return out


def _split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """`rubikgen run ... -- ARGS`: ARGS go to the binary untouched."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command == "run" and "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def _join_cflags(argv: list[str]) -> list[str]:
    """`--cflags "-O1 -g"` as `--cflags=-O1 -g`: argparse would read a value starting with
    '-O' as the -O option."""
    out: list[str] = []
    it = iter(argv)
    for a in it:
        out.append(a if a != "--cflags" else "--cflags=" + next(it, ""))
    return out


def _cmd_ctl(args: argparse.Namespace) -> int:
    from rubikgen.cli.chain import command

    return command(args)


def _cmd_test(args: argparse.Namespace) -> int:
    from rubikgen.spectest.cli import command

    return command(args)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    argv, extra = _split_extra(list(sys.argv[1:] if argv is None else argv))
    argv = _join_cflags(argv)
    args, unknown = parser.parse_known_args(argv)
    if args.cmd == "run" and args.capture is None and len(unknown) == 1:
        # `run STACK --opt X CAPTURE`: argparse gave the optional CAPTURE up at STACK
        if not unknown[0].startswith("-"):
            args.capture, unknown = unknown[0], []
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.extra = extra
    if args.cmd is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        specpath.configure(getattr(args, "spec_path", []))
        for name in ("stack", "spec"):  # a stock: name as the file argument
            if isinstance(getattr(args, name, None), str):
                setattr(args, name, resolve_arg(getattr(args, name)))
        commands = {
            "validate": cmd_validate,
            "schema": cmd_schema,
            "graph": cmd_graph,
            "build": cmd_build,
            "run": cmd_run,
            "check": cmd_check,
            "stubs": cmd_stubs,
            "ir": cmd_ir,
            "test": _cmd_test,
            "ctl": _cmd_ctl,
        }
        return commands[args.cmd](args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except ImportError as e:  # a module missing from the installation: not a bug to report
        sys.stderr.write(
            f"rubikgen: error: the installation looks broken: {_import_problem(e)}\n"
            "(reinstall rubikgen: pip install --force-reinstall rubikgen)\n"
        )
        if os.environ.get("RUBIKGEN_DEBUG"):
            traceback.print_exc()
        return EXIT_INTERNAL
    except Exception as e:
        sys.stderr.write(
            f"rubikgen: internal error: {type(e).__name__}: {e}\n(this is a rubikgen bug; please report it)\n"
        )
        if os.environ.get("RUBIKGEN_DEBUG"):
            traceback.print_exc()
        return EXIT_INTERNAL
