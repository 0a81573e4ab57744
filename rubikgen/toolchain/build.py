"""Build a stack into a binary, and check what is on disk against the specs.

* `emit` writes the generated files of a stack into a directory; the handler file only when it
  does not exist yet, so regeneration never touches user code.
* `build` generates, emits, makes sure the C runtime libraries are built and compiles
  `S_gen.c`, the handlers and `S_main.c` into `out_dir/S` (`S-asan` with sanitizers). A stamp
  file next to the binary (`S.stamp`) records the compiler command and the spec hash; the
  compile is skipped while they are unchanged and the binary is newer than all its inputs.
* `check` reports generated files that are missing or stale and handler definitions that no
  longer match the stack's handlers. It never writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rubikgen.toolchain import resources
from rubikgen.toolchain.csource import FunctionDef, function_definitions, normalise_signature  # noqa: F401

if TYPE_CHECKING:
    from rubikgen.backend.emit import Generated
    from rubikgen.pipeline import Compilation
    from rubikgen.toolchain.handlercheck import Finding

# The checkout's top-level directories, or their copies in an installed package (resources.py);
# REPO is whichever root holds them, with the checkout's layout in both cases.
REPO = resources.data_root()
RUNTIME_DIR = resources.runtime_dir()
NF_DIR = resources.nf_dir()

BASE_CFLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-D_DEFAULT_SOURCE")
# -O1 after BASE_CFLAGS' -O2: the level ASan's authors recommend, and instrumenting the one big
# per-packet function at -O2 takes twice as long to compile (13 s against 6 s for tcp_ip)
SAN_CFLAGS = (
    "-O1",
    "-fsanitize=address,undefined",
    "-fno-omit-frame-pointer",
    "-fno-sanitize-recover=all",
    "-g",
)
HASH_RE = re.compile(r"rubikgen:spec-hash=([0-9A-Fa-f]+)")


class BuildError(Exception):
    """A build step failed. `output` holds the tool's own messages (the compiler's stderr)."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.output = output

    def __str__(self) -> str:
        return self.message + ("\n" + self.output.rstrip() if self.output else "")


class HandlerError(BuildError):
    """The handler check found errors (`findings`): the build stopped before compiling."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        errors = sum(f.severity == "error" for f in findings)
        super().__init__(
            f"{errors} handler problem(s): the build stops before compiling",
            "\n".join(map(str, findings)),
        )
        self.findings = list(findings)


@dataclass(frozen=True)
class BuildResult:
    binary: Path
    command: str  # the compiler command, shell-quoted
    rebuilt: bool  # False when the binary was up to date
    generated: Generated
    # the binary was put in place from RG_BUILD_CACHE (rebuilt, not compiled)
    from_cache: bool = False


# -- emitting ---------------------------------------------------------------------------------


def _write_if_changed(path: Path, text: str) -> bool:
    """Writes text unless the file already holds it (its mtime then stays). True if written."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return True


def emit(gen: Generated, out_dir: str | os.PathLike[str]) -> list[Path]:
    """Writes the generated files into out_dir; returns the paths actually written.

    Generated files are rewritten only when their text changed. The handler stub is written
    only when the handler file does not exist: it is the user's code from then on.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [
        out / name for name, text in gen.files.items() if _write_if_changed(out / name, text)
    ]
    handlers = out / gen.handlers_file
    if not handlers.exists() or (
        _untouched_stub(handlers.read_text(encoding="utf-8", errors="replace"))
        and handlers.read_text(encoding="utf-8", errors="replace") != gen.handlers_stub
    ):
        handlers.write_text(gen.handlers_stub, encoding="utf-8")
        written.append(handlers)
    return written


_STUB_FN = re.compile(
    r"void\s+\w+\s*\(\s*const\s+struct\s+\w+_args\s*\*\s*args\s*,\s*rg_hctx\s*\*\s*h\s*\)\s*"
    r"\{\s*\(void\)\s*args\s*;\s*\(void\)\s*h\s*;\s*\}"
)


def _untouched_stub(text: str) -> bool:
    """A handler file exactly as rubikgen wrote it (its header comment, then per handler a
    comment and an empty body; nothing of the user's, not even a comment): it may be rewritten
    when the stack's handlers change, so a stale stub never breaks a build."""
    if not text.startswith("/* ") or "Written once by rubikgen as stubs" not in text:
        return False
    rest = text[text.index("*/") + 2 :]  # the header comment
    rest = re.sub(r"/\*[^\n]*\*/\s*" + _STUB_FN.pattern, "", rest)
    rest = re.sub(r'#include\s+"\w+_gen\.h"', "", rest)
    rest = re.sub(
        r"/\* This stack declares no handlers\. \*/\s*typedef\s+int\s+\w+_no_handlers_\s*;",
        "",
        rest,
    )
    return rest.strip() == ""


# -- runtime libraries ------------------------------------------------------------------------


def runtime_libs(sanitize: bool) -> list[Path]:
    """The libraries a stack links against, in link order (runtime-c/Makefile): the capture
    driver (rg_main), which finds the network functions through their registry, the network
    functions, then the runtime both use."""
    suffix = "-asan" if sanitize else ""
    build_dir = resources.runtime_build_dir()
    return [build_dir / f"lib{name}{suffix}.a" for name in ("rgmain", "rgnf", "rgrt")]


def ensure_runtime(sanitize: bool, quiet: bool) -> list[Path]:
    """Runs `make -s -C runtime-c lib` (or `asan-lib`); returns the libraries.

    An installed package builds into its per-user cache directory (`BUILD=`); either way a lock
    is held so that concurrent builds (pre-commit, parallel test workers) do not race on the
    same objects."""
    if not (RUNTIME_DIR / "Makefile").is_file():
        raise BuildError(
            f"the C runtime is not where rubikgen expects it ({RUNTIME_DIR}): the installation "
            "looks broken; reinstall rubikgen (pip install --force-reinstall rubikgen)"
        )
    target = "asan-lib" if sanitize else "lib"
    cmd = ["make", "-s", "-C", str(RUNTIME_DIR), target]
    build_dir = resources.runtime_build_dir()
    if resources.installed():
        cmd.insert(-1, f"BUILD={build_dir}")
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        hint = " (set XDG_CACHE_HOME to a writable directory)" if resources.installed() else ""
        raise BuildError(
            f"cannot create the runtime build directory {build_dir}: {e.strerror or e}{hint}"
        ) from e
    try:
        with _lock(build_dir / ".lock"):
            proc = subprocess.run(cmd, capture_output=quiet, text=True)
    except FileNotFoundError as e:
        raise BuildError("'make' not found: install a C toolchain (bash ci/setup.sh)") from e
    if proc.returncode != 0:
        out = (proc.stdout or "") + (proc.stderr or "") if quiet else ""
        raise BuildError(f"building the C runtime failed: {shlex.join(cmd)}", out)
    libs = runtime_libs(sanitize)
    missing = [str(p) for p in libs if not p.is_file()]
    if missing:
        raise BuildError(f"'{shlex.join(cmd)}' did not produce {', '.join(missing)}")
    return libs


@contextlib.contextmanager
def _lock(path: Path | None) -> Iterator[None]:
    """An exclusive lock on path for the duration (nothing when path is None)."""
    if path is None:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def pkg_libs(pkg: str, fallback: str) -> list[str]:
    """Linker flags for a C library (pkg-config, or the plain fallback)."""
    try:
        proc = subprocess.run(
            ["pkg-config", "--libs", pkg], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return [fallback]
    return shlex.split(proc.stdout) or [fallback]


def pcap_libs() -> list[str]:
    """Linker flags for libpcap (pkg-config, or plain -lpcap)."""
    return pkg_libs("libpcap", "-lpcap")


#: What `build --io` accepts: the packet sources a binary is linked with. "pcap": capture
#: files and live interfaces (libpcap and AF_PACKET rings, always); "dpdk" and "all": also
#: DPDK ports; "afxdp": also AF_XDP sockets (libxdp).
IO_CHOICES = ("pcap", "dpdk", "all", "afxdp")

#: the optional sources: each in an archive of runtime-c's own, built when pkg-config finds
#: its libraries (the pkg-config names, the package that has them, the make target that says
#: why it was not built)
_OPTIONAL_IO = {
    "dpdk": ("libdpdk", "DPDK's development files (Debian/Ubuntu: apt-get install libdpdk-dev)"
             " or point PKG_CONFIG_PATH at the lib/pkgconfig directory of a DPDK build",
             "dpdk-lib"),
    "afxdp": ("libxdp libbpf", "libxdp and libbpf (Debian/Ubuntu: apt-get install libxdp-dev "
              "libbpf-dev)", "afxdp-lib"),
}  # fmt: skip


def _io_sources(io: str) -> list[str]:
    return {"pcap": [], "dpdk": ["dpdk"], "all": ["dpdk"], "afxdp": ["afxdp"]}[io]


def io_link_flags(io: str) -> list[str]:
    """Linker flags for the packet sources of `io`, before the runtime libraries: for DPDK and
    AF_XDP the source's archive (runtime-c builds it when pkg-config finds its libraries),
    `-u` so that the source registry's weak reference pulls it in."""
    if io not in IO_CHOICES:
        raise BuildError(f"--io {io}: not one of {', '.join(IO_CHOICES)}")
    flags: list[str] = []
    for src in _io_sources(io):
        pkgs, what, target = _OPTIONAL_IO[src]
        try:
            found = subprocess.run(["pkg-config", "--exists", *pkgs.split()]).returncode == 0
        except OSError:
            found = False
        if not found:
            raise BuildError(
                f"--io {io}: pkg-config finds no {pkgs.replace(' ', ' or ')}: install {what}; "
                "--io pcap needs neither"
            )
        archive = resources.runtime_build_dir() / f"librg{src}.a"
        if not archive.is_file():
            raise BuildError(
                f"--io {io}: the runtime's {src} source was not built ({archive}): "
                f"make -C runtime-c {target} says why"
            )
        flags += [f"-Wl,-u,rg_source_{src}", str(archive)]
    return flags


def io_libs(io: str) -> list[str]:
    """The libraries of the optional sources of `io` (after the runtime's)."""
    fallback = {"libdpdk": "-lrte_eal", "libxdp": "-lxdp", "libbpf": "-lbpf"}
    return [
        f
        for src in _io_sources(io)
        for pkg in _OPTIONAL_IO[src][0].split()
        for f in pkg_libs(pkg, fallback[pkg])
    ]


def xdp_archive(sanitize: bool) -> Path:
    """The archive of the driver's --xdp (runtime-c/main/rg_xdp.c)."""
    return resources.runtime_build_dir() / f"librgxdp{'-asan' if sanitize else ''}.a"


def xdp_link_flags(sanitize: bool) -> list[str]:
    """Linker flags for --xdp, before the runtime libraries: its archive (runtime-c builds it
    when pkg-config finds libbpf), `-u` so that the driver's weak reference pulls it in."""
    archive = xdp_archive(sanitize)
    if not archive.is_file():
        raise BuildError(
            f"--xdp: the runtime's XDP part was not built ({archive}): pkg-config finds no "
            "libbpf (Debian/Ubuntu: apt-get install libbpf-dev; bash ci/setup.sh)"
        )
    return ["-Wl,-u,rg_xdp_impl", str(archive)]


# libraries a stack's transforms need (rubikgen/sema/transforms.py), only when it uses them
_PKG_FALLBACK = {"libcrypto": "-lcrypto"}


# -- compiling --------------------------------------------------------------------------------


def binary_path(out_dir: Path, stack: str, sanitize: bool) -> Path:
    return out_dir / (f"{stack}-asan" if sanitize else stack)


def spans_define(stack: str, handlers: Path) -> list[str]:
    """`-DS_SPANS=0` when the handler file names no setter of the stack (`S_set_*`,
    `S_*_strip_option`): the generated code then records where each header is only for
    `--checksums` (backend/setters.py). Any mention keeps them, so it errs on recording."""
    try:
        text = handlers.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    if f"{stack}_set_" in text or re.search(rf"\b{re.escape(stack)}_\w+_strip_option\b", text):
        return []
    return [f"-D{stack}_SPANS=0"]


def compile_command(
    gen: Generated,
    out_dir: Path,
    handlers: Path,
    libs: Sequence[Path],
    *,
    cc: str,
    cflags: Sequence[str],
    sanitize: bool,
    io: str = "pcap",
    xdp: bool = False,
) -> list[str]:
    """The compiler command. User cflags come last, so they override ours (-O3, -Wno-error).
    xdp: linked with the driver's --xdp (rg_xdp.c) and libbpf."""
    sources = [out_dir / f"{gen.stack}_gen.c", handlers, out_dir / f"{gen.stack}_main.c"]
    return [
        *shlex.split(cc),
        *BASE_CFLAGS,
        *(SAN_CFLAGS if sanitize else ()),
        f"-I{out_dir}",
        f"-I{RUNTIME_DIR / 'include'}",
        f"-I{NF_DIR}",
        *spans_define(gen.stack, handlers),
        *map(str, sources),
        "-o",
        str(binary_path(out_dir, gen.stack, sanitize)),
        *io_link_flags(io),
        *(xdp_link_flags(sanitize) if xdp else ()),
        *map(str, libs),
        *pcap_libs(),
        *(pkg_libs("libbpf", "-lbpf") if xdp else ()),
        *pkg_libs("yaml-0.1", "-lyaml"),  # the driver's chain files (--chain)
        *io_libs(io),  # DPDK's, libxdp's
        *[
            f
            for p in gen.pkg_config
            if p != "libcrypto"
            for f in pkg_libs(p, _PKG_FALLBACK.get(p, f"-l{p}"))
        ],
        *pkg_libs("libcrypto", "-lcrypto"),  # the NFs' Community ID (SHA-1), QUIC transforms
        *cflags,
    ]


def spec_files(stack_path: str | os.PathLike[str]) -> list[Path]:
    """The stack file, the stacks it extends and the protocol files its layers name (those that
    exist)."""
    from rubikgen.pipeline import Compilation

    return Compilation(stack_path).spec_files()


def stack_name(stack_path: str | os.PathLike[str]) -> str:
    """The `stack:` name of a stack file (its file name stem if it cannot be read)."""
    from rubikgen.pipeline import Compilation

    return Compilation(stack_path).stack_name


def _stamp_path(binary: Path) -> Path:
    return binary.with_name(binary.name + ".stamp")


def _read_stamp(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _newest_mtime(paths: Iterable[Path]) -> int:
    return max((p.stat().st_mtime_ns for p in paths if p.exists()), default=0)


def _up_to_date(binary: Path, command: str, spec_hash: str, inputs: Iterable[Path]) -> bool:
    stamp = _read_stamp(_stamp_path(binary))
    if stamp.get("command") != command or stamp.get("spec_hash") != spec_hash:
        return False
    if not binary.is_file():
        return False
    return binary.stat().st_mtime_ns > _newest_mtime(inputs)


def _build_inputs(
    sources: Sequence[Path], libs: Sequence[Path], specs: Sequence[Path]
) -> list[Path]:
    headers = sorted((RUNTIME_DIR / "include").rglob("*.h")) + sorted(NF_DIR.glob("*.h"))
    return [*sources, *libs, *specs, *headers]


def _write_stamp(stamp: Path, command: str, spec_hash: str, opt_level: int) -> None:
    record = {"command": command, "spec_hash": spec_hash, "opt_level": opt_level}
    stamp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def _cache_key(command: str, out: Path, inputs: Iterable[Path]) -> str:
    """Content address of a compile: the command (its output directory written as `@OUT`, so
    one stack built into two directories shares an entry) and the bytes of every input (the
    generated sources, the handlers, the runtime archives and headers, the specs)."""
    h = hashlib.sha256(command.replace(str(out), "@OUT").encode())
    for p in inputs:
        h.update(b"\0" + p.name.encode() + b"\0")
        h.update(p.read_bytes() if p.is_file() else b"<missing>")
    return h.hexdigest()


def _cache_dir() -> Path | None:
    """RG_BUILD_CACHE: a directory of compiled binaries by content address, shared by every
    build that sets it (the test suite does; tests/conftest.py). Unset: no cache."""
    d = os.environ.get("RG_BUILD_CACHE")
    return Path(d) if d else None


def _from_cache(cache: Path, key: str, tmp: Path) -> bool:
    entry = cache / key
    if not entry.is_file():
        return False
    # a copy, not a link: the binary in place is newer than its inputs, as the stamp check wants
    tmp.write_bytes(entry.read_bytes())
    tmp.chmod(0o755)
    return True


def _log_build(binary: Path, key: str, outcome: str, start: float, command: str) -> None:
    """RG_BUILD_LOG: one JSON line per build appended to that file (what was built, its cache
    key, whether it compiled, seconds), so that a test run's duplicate compiles can be counted
    (docs/testing.md). Unset: nothing."""
    path = os.environ.get("RG_BUILD_LOG")
    if not path:
        return
    record = {"binary": binary.name, "dir": str(binary.parent), "key": key[:16],
              "outcome": outcome, "seconds": round(time.monotonic() - start, 2),
              "pid": os.getpid(), "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
              "command": command.replace(str(binary.parent), "@OUT")}  # fmt: skip
    # one write in append mode: the lines of builds side by side stay whole
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _to_cache(cache: Path, key: str, binary: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    part = cache / f".{key}.{os.getpid()}.tmp"
    part.write_bytes(binary.read_bytes())
    os.replace(part, cache / key)  # whole or absent, for builds running side by side


def build(
    stack_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    handlers: Path | None = None,
    cc: str = "cc",
    cflags: Sequence[str] = (),
    opt_level: int = 2,
    sanitize: bool = False,
    io: str = "pcap",
    quiet: bool = False,
    disable: Sequence[str] = (),
    timings: dict[str, float] | None = None,
    report: Callable[[Sequence[Finding]], None] | None = None,
) -> BuildResult:
    """Generates, emits and compiles a stack; skips the compile when nothing changed.

    `handlers` replaces out_dir/S_handlers.c in the compile (the file is used where it is).
    Unless quiet, prints the compiler command before compiling. First runs the handler check
    (handlercheck.review) and gives its findings to `report`; errors among them raise
    HandlerError before anything is written or compiled. Raises GenerateError when the specs
    have errors and BuildError when the runtime or the compile fails.
    """
    from rubikgen.pipeline import Compilation

    comp = Compilation(stack_path, opt_level=opt_level, disable=disable, timings=timings)
    return build_compilation(
        comp, out_dir, handlers=handlers, cc=cc, cflags=cflags, sanitize=sanitize, io=io,
        quiet=quiet, report=report,
    )  # fmt: skip


def build_compilation(
    comp: Compilation,
    out_dir: str | os.PathLike[str],
    *,
    handlers: Path | None = None,
    cc: str = "cc",
    cflags: Sequence[str] = (),
    sanitize: bool = False,
    io: str = "pcap",
    quiet: bool = False,
    report: Callable[[Sequence[Finding]], None] | None = None,
    xdp: bool = False,
) -> BuildResult:
    """The compile stage of a compilation (see `build`): its generated files are emitted into
    out_dir and compiled with the runtime (xdp: with the driver's --xdp, compile_command)."""
    stack_path = comp.stack_path
    opt_level = comp.options.opt_level
    gen = comp.generated
    out = Path(out_dir)
    hfile = Path(handlers) if handlers is not None else out / gen.handlers_file
    if handlers is not None or hfile.exists():  # else emit writes the stub
        findings = handler_findings(gen, stack_path, out, hfile, handlers is not None)
        if report is not None and findings:
            report(findings)
        if any(f.severity == "error" for f in findings):
            raise HandlerError(findings)
    libs = ensure_runtime(sanitize, quiet)
    out.mkdir(parents=True, exist_ok=True)
    # Two builds into one directory at once (two `rubikgen run`s) take turns: each emits and
    # compiles its own sources, and the binary is replaced by a rename, so a run executing the
    # old one is never handed a half-written file (ETXTBSY).
    with _lock(out / ".build.lock"):
        emit(gen, out)
        cmd = compile_command(
            gen, out, hfile, libs, cc=cc, cflags=list(cflags), sanitize=sanitize, io=io, xdp=xdp
        )
        command = shlex.join(cmd)
        binary = binary_path(out, gen.stack, sanitize)
        sources = [out / name for name in gen.files] + [hfile]
        # the optional sources' archives too (librgdpdk.a, librgafxdp.a): a rebuilt one relinks
        archives = [Path(f) for f in io_link_flags(io) if f.endswith(".a")]
        archives += [xdp_archive(sanitize)] if xdp else []
        inputs = _build_inputs(sources, [*libs, *archives], comp.spec_files())
        if not quiet:
            print(command, flush=True)
        start = time.monotonic()
        if _up_to_date(binary, command, gen.spec_hash, inputs):
            _log_build(binary, "", "up-to-date", start, command)
            return BuildResult(binary, command, False, gen)
        stamp = _stamp_path(binary)
        stamp.unlink(missing_ok=True)  # a failed compile leaves no stamp: the next build retries
        tmp = binary.with_name(f".{binary.name}.{os.getpid()}.tmp")
        cache = _cache_dir()
        key = _cache_key(command, out, inputs) if cache is not None else ""
        if cache is not None:
            cache.mkdir(parents=True, exist_ok=True)
        # One compile per key: a build that finds another compiling the same binary (two test
        # processes wanting one sanitized stack) waits for it and takes its result.
        with _lock(cache / f".{key}.lock" if cache is not None else None):
            if cache is not None and _from_cache(cache, key, tmp):
                os.replace(tmp, binary)
                _write_stamp(stamp, command, gen.spec_hash, opt_level)
                _log_build(binary, key, "cache", start, command)
                return BuildResult(binary, command, True, gen, from_cache=True)
            run_cmd = [str(tmp) if a == str(binary) else a for a in cmd]
            try:
                proc = subprocess.run(run_cmd, capture_output=True, text=True)
            except FileNotFoundError as e:
                raise BuildError(f"C compiler '{cc}' not found") from e
            if proc.returncode != 0:
                tmp.unlink(missing_ok=True)
                raise BuildError(
                    f"compiling {gen.stack} failed (exit status {proc.returncode})",
                    proc.stderr + proc.stdout,
                )
            if tmp.exists():  # (`--cc true` only generates: nothing to put in place)
                os.replace(tmp, binary)
                if cache is not None:
                    _to_cache(cache, key, binary)
        if not quiet and (proc.stderr or proc.stdout):
            sys.stderr.write(proc.stderr + proc.stdout)
        _write_stamp(stamp, command, gen.spec_hash, opt_level)
        _log_build(binary, key, "compiled", start, command)
        return BuildResult(binary, command, True, gen)


# -- checking ---------------------------------------------------------------------------------


# The C scanner lives in csource.py (the handler check uses it too); its names stay importable
# from here.
def check_handlers(path: Path, prototypes: dict[str, str]) -> list[str]:
    """Handler definitions in path that do not match the stack's handler prototypes."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return [f"{path}: missing (the handler file; 'rubikgen build' writes a stub)"]
    problems: list[str] = []
    defs = {d.name: d for d in function_definitions(text)}
    for name, proto in prototypes.items():
        d = defs.get(name)
        if d is None:
            problems.append(f"{path}: handler '{name}' is not defined; declare it as: {proto}")
        elif d.signature != normalise_signature(proto):
            problems.append(
                f"{path}:{d.line}: handler '{name}' does not match the stack's declaration\n"
                f"    found:    {d.signature}\n"
                f"    expected: {normalise_signature(proto)}"
            )
    for d in defs.values():
        if d.name not in prototypes and not d.static and "rg_hctx" in d.signature.split():
            problems.append(
                f"{path}:{d.line}: '{d.name}' looks like a handler but the stack declares no "
                "handler of that name (removed or renamed?)"
            )
    return problems


def stubs_command(stack_path: str | os.PathLike[str], out: Path, hfile: Path, given: bool) -> str:
    """The command that adds the stubs of new handlers to hfile."""
    where = f"--handlers {hfile}" if given else f"-o {out}"
    return f"rubikgen stubs {stack_path} --append {where}"


def handler_findings(
    gen: Generated, stack_path: str | os.PathLike[str], out: Path, hfile: Path, given: bool
) -> list[Finding]:
    """The handler check of hfile against the stack and the last build in out."""
    from rubikgen.toolchain.handlercheck import review

    fix = stubs_command(stack_path, out, hfile, given)
    return review(gen.handler_sigs, gen.prototypes, hfile, out / f"{gen.stack}_gen.h", fix)


def _recorded_opt_level(out: Path, stack: str) -> int:
    stamps = [_stamp_path(binary_path(out, stack, s)) for s in (False, True)]
    stamps = sorted((p for p in stamps if p.is_file()), key=lambda p: p.stat().st_mtime_ns)
    level = _read_stamp(stamps[-1]).get("opt_level") if stamps else None
    return level if isinstance(level, int) else 2


def check(
    stack_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    handlers: Path | None = None,
    compilation: Compilation | None = None,
) -> list[str]:
    """Problems of a build directory: missing or stale generated files, handler mismatches.

    Compares with what `generate` produces now (at the -O level of the last build, read from
    its stamp). Never writes. Raises GenerateError when the specs have errors. `compilation`:
    the stack's, if the caller has one already (its loaded specs are reused).
    """
    from rubikgen.pipeline import Compilation

    out = Path(out_dir)
    comp = compilation if compilation is not None else Compilation(stack_path)
    level = _recorded_opt_level(out, comp.stack_name)
    gen = comp.with_options(opt_level=level).generated
    problems: list[str] = []
    for name, text in gen.files.items():
        path = out / name
        try:
            current = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            problems.append(f"{path}: missing (run 'rubikgen build {stack_path} -o {out}')")
            continue
        if current == text:
            continue
        found = HASH_RE.search(current)
        if found and found.group(1) != gen.spec_hash:
            problems.append(
                f"{path}: stale: generated from specs with hash {found.group(1)[:16]}, "
                f"the specs now hash to {gen.spec_hash[:16]} (run 'rubikgen build')"
            )
        else:
            problems.append(
                f"{path}: stale: differs from what rubikgen generates now "
                "(edited by hand? run 'rubikgen build' to regenerate it)"
            )
    hfile = Path(handlers) if handlers is not None else out / gen.handlers_file
    problems += map(str, handler_findings(gen, stack_path, out, hfile, handlers is not None))
    return problems
