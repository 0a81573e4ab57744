"""rubikgen build / run / check with the real C compiler and runtime (no mocks).

The stack is the stock TCP/IP stack. Tests that edit specs work on a copy of specs/ in a
temporary directory; the repository's specs are never modified.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.cli import main
from rubikgen.toolchain.build import build, check, check_handlers, function_definitions

ROOT = REPO_ROOT
SPECS = ROOT / "specs"
STACK = SPECS / "stacks" / "tcp_ip.yaml"
CAPTURE = ROOT / "captures" / "raw-ipv4-ipv6-http.pcap"


@pytest.fixture(scope="module")
def backend():
    import rubikgen.backend.emit

    return rubikgen.backend.emit


@pytest.fixture(scope="module")
def built(backend, tmp_path_factory):
    """tcp_ip built once into a fresh directory (for tests that only read it)."""
    out = tmp_path_factory.mktemp("tcp_ip")
    return build(STACK, out, quiet=True), out


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    """A private copy of specs/; returns the copy's tcp_ip stack file."""
    shutil.copytree(SPECS, tmp_path / "specs")
    return tmp_path / "specs" / "stacks" / "tcp_ip.yaml"


def _mtimes(d: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in d.iterdir()}


def _param_names(proto: str) -> list[str]:
    """Parameter names of a C prototype like 'void f(const struct a *args, rg_hctx *h)'."""
    params = proto[proto.index("(") + 1 : proto.rindex(")")]
    return [re.findall(r"\w+", p)[-1] for p in params.split(",") if p.strip() not in ("", "void")]


def _counting_handlers(prototypes: dict[str, str], stack: str) -> str:
    """A user handler file that counts the calls of every handler and prints them at exit."""
    names = list(prototypes)
    lines = [
        "#include <stdio.h>",
        "#include <stdlib.h>",
        f'#include "{stack}_gen.h"',
        f"static unsigned long calls[{len(names)}];",
        "static int registered;",
        "static void report(void)",
        "{",
    ]
    lines += [f'    printf("my-handlers: {n}=%lu\\n", calls[{i}]);' for i, n in enumerate(names)]
    lines += ["}", ""]
    for i, proto in enumerate(prototypes.values()):
        lines += [proto, "{"]
        lines += [f"    (void){p};" for p in _param_names(proto)]
        lines += [
            "    if (!registered) {",
            "        registered = 1;",
            "        atexit(report);",
            "    }",
            f"    calls[{i}]++;",
            "}",
            "",
        ]
    return "\n".join(lines)


# -- building ---------------------------------------------------------------------------------


def test_build_produces_a_working_binary(built) -> None:
    res, out = built
    assert res.rebuilt
    assert res.binary == out / "tcp_ip" and os.access(res.binary, os.X_OK)
    assert res.command.startswith("cc -std=c11 -O2 -Wall -Wextra -Werror -D_DEFAULT_SOURCE")
    for name in ("tcp_ip_gen.h", "tcp_ip_gen.c", "tcp_ip_main.c", "tcp_ip_handlers.c"):
        assert (out / name).is_file(), name
    assert f"rubikgen:spec-hash={res.generated.spec_hash}" in (out / "tcp_ip_gen.c").read_text()
    proc = subprocess.run([res.binary, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout or proc.stderr


def test_second_build_is_not_rebuilt(built) -> None:
    res, out = built
    before = _mtimes(out)
    again = build(STACK, out, quiet=True)
    assert not again.rebuilt
    assert again.command == res.command
    assert _mtimes(out) == before  # neither the generated files nor the binary were rewritten


def test_check_is_clean_after_a_build(built) -> None:
    _, out = built
    assert check(STACK, out) == []
    assert main(["check", str(STACK), "-o", str(out)]) == 0


@pytest.mark.parametrize("touched", ["stacks/tcp_ip.yaml", "protocols/tcp.yaml"])
def test_touching_a_spec_rebuilds(backend, specs: Path, tmp_path: Path, touched: str) -> None:
    out = tmp_path / "b"
    first = build(specs, out, quiet=True)
    assert not build(specs, out, quiet=True).rebuilt
    later = first.binary.stat().st_mtime + 5
    os.utime(specs.parents[1] / touched, (later, later))
    assert build(specs, out, quiet=True).rebuilt


def test_handler_file_is_never_overwritten(backend, specs: Path, tmp_path: Path) -> None:
    out = tmp_path / "b"
    res = build(specs, out, quiet=True)
    hfile = out / res.generated.handlers_file
    assert hfile.read_text() == res.generated.handlers_stub
    mine = res.generated.handlers_stub + "\n/* my own code */\n"
    hfile.write_text(mine)
    # a spec change regenerates the other files but leaves the handler file alone
    udp = specs.parents[1] / "protocols" / "udp.yaml"
    udp.write_text(udp.read_text().replace("timeout: 60s", "timeout: 61s"))
    again = build(specs, out, quiet=True)
    assert again.rebuilt and again.generated.spec_hash != res.generated.spec_hash
    assert hfile.read_text() == mine


def test_sanitized_build(backend, tmp_path: Path) -> None:
    res = build(STACK, tmp_path, sanitize=True, quiet=True)
    assert res.binary == tmp_path / "tcp_ip-asan"
    assert "-fsanitize=address,undefined" in res.command and "librgrt-asan.a" in res.command
    proc = subprocess.run([res.binary, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# -- check --------------------------------------------------------------------------------------


def test_check_reports_stale_files_after_a_spec_edit(backend, specs: Path, tmp_path: Path) -> None:
    out = tmp_path / "b"
    build(specs, out, quiet=True)
    assert check(specs, out) == []
    udp = specs.parents[1] / "protocols" / "udp.yaml"
    udp.write_text(udp.read_text().replace("timeout: 60s", "timeout: 61s"))
    before = _mtimes(out)
    problems = check(specs, out)
    assert any("tcp_ip_gen.c" in p and "stale" in p for p in problems), problems
    assert _mtimes(out) == before  # check never writes
    (out / "tcp_ip_main.c").unlink()
    assert any("tcp_ip_main.c" in p and "missing" in p for p in check(specs, out))


def test_check_reports_handler_mismatches(backend, built, tmp_path: Path, capsys) -> None:
    res, out = built
    protos = res.generated.prototypes
    assert len(protos) >= 3, protos
    changed, dropped, spaced = list(protos)[:3]
    text = [f'#include "{res.generated.stack}_gen.h"']
    text.append(protos[changed].replace("const ", "", 1) + " { }")
    # the same prototype laid out differently is fine
    text.append(protos[spaced].replace("(", " (\n    ").replace(", ", ",\n    ") + "\n{\n}")
    text += [p + " { }" for n, p in protos.items() if n not in (changed, dropped, spaced)]
    text.append("void old_handler(const struct old_handler_args *args, rg_hctx *h) { }")
    text.append("static void helper(rg_hctx *h) { (void)h; }")
    hfile = tmp_path / "handlers.c"
    hfile.write_text("\n".join(text) + "\n")
    problems = [p for p in check(STACK, out, handlers=hfile) if str(hfile) in p]
    assert len(problems) == 3, problems
    assert any(f"'{changed}' does not match" in p for p in problems)
    # a missing definition is reported where the stack declares the handler
    assert any(
        re.match(rf"\S*tcp_ip\.yaml:\d+:\d+: error: handler '{dropped}' .* is not defined in", p)
        for p in problems
    ), problems
    assert any("'old_handler'" in p for p in problems)
    assert main(["check", str(STACK), "-o", str(out), "--handlers", str(hfile)]) == 1
    assert f"'{changed}' does not match" in capsys.readouterr().out


# -- user handlers, run -----------------------------------------------------------------------


def test_user_handlers_with_run(backend, built, tmp_path: Path, capfd) -> None:
    res, _ = built
    hfile = tmp_path / "my_handlers.c"
    hfile.write_text(_counting_handlers(res.generated.prototypes, res.generated.stack))
    bdir, out = tmp_path / "b", tmp_path / "out"
    args = ["run", str(STACK), str(CAPTURE), "--nf", "events", "--out", str(out)]
    args += ["--build-dir", str(bdir), "--handlers", str(hfile)]
    assert main(args) == 0
    cap = capfd.readouterr()
    assert "rubikgen: rebuilt" in cap.err
    counts = {k: int(v) for k, v in re.findall(r"my-handlers: (\w+)=(\d+)", cap.out)}
    # the user's functions are called exactly as often as the stack calls its handlers (the
    # events NF observes every call), and once per UDP datagram tshark finds in the capture
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    assert counts == {h: sum(e.get("handler") == h for e in events) for h in counts}, cap.out
    assert counts["tcp_data"] > 0 and counts["udp_data"] > 0, cap.out
    if shutil.which("tshark"):
        udp = subprocess.run(
            ["tshark", "-n", "-r", str(CAPTURE), "-Y", "udp && !icmp && !icmpv6", "-T", "fields",
             "-e", "frame.number"], capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert counts["udp_data"] + counts["udp6_data"] == len(udp), cap.out
    # the user's file is compiled where it is; the stub in the build directory is untouched
    stub = bdir / res.generated.handlers_file
    assert stub.read_text() == res.generated.handlers_stub
    assert str(hfile) in (bdir / "tcp_ip.stamp").read_text()
    # up to date now: no rebuild, no message
    assert main(args) == 0
    assert "rebuilt" not in capfd.readouterr().err


def test_run_passes_the_binary_exit_status_through(backend, built, tmp_path: Path) -> None:
    res, out = built
    extra = ["--no-such-option-xyz"]
    direct = subprocess.run(
        [res.binary, CAPTURE, "--nf", "none", "--out", tmp_path, "--summary", "text", *extra],
        capture_output=True,
        timeout=60,
    )
    assert direct.returncode != 0
    args = ["run", str(STACK), str(CAPTURE), "--nf", "none", "--out", str(tmp_path)]
    assert main([*args, "--build-dir", str(out), "--", *extra]) == direct.returncode


def test_compile_error_in_user_handlers(backend, built, tmp_path: Path, capfd) -> None:
    res, _ = built
    bad = tmp_path / "bad_handlers.c"
    protos = list(res.generated.prototypes.values())
    fine = "".join(f"{p}\n{{\n    (void)args;\n    (void)h;\n}}\n" for p in protos[1:])
    bad.write_text(
        f'#include "tcp_ip_gen.h"\n{protos[0]}\n{{\n    undeclared_counter++;\n}}\n{fine}'
    )
    rc = main(["build", str(STACK), "-o", str(tmp_path / "b"), "--handlers", str(bad)])
    assert rc == 1
    cap = capfd.readouterr()
    assert "-std=c11 -O2" in cap.out  # the command is printed first
    assert "bad_handlers.c" in cap.err and "undeclared_counter" in cap.err
    assert "error" in cap.err and "Traceback" not in cap.err + cap.out
    assert not (tmp_path / "b" / "tcp_ip.stamp").exists()


def test_build_reports_spec_errors_like_validate(backend, specs: Path, tmp_path: Path, capfd):
    specs.write_text(specs.read_text().replace('"sdu_len > 0"', '"sdu_lenx > 0"', 1))
    rc = main(["build", str(specs), "-o", str(tmp_path / "b")])
    cap = capfd.readouterr()
    assert rc == 1
    assert re.search(r"tcp_ip\.yaml:\d+:\d+: error\[RG\d{3}\]: ", cap.err), cap.err
    assert "sdu_lenx" in cap.err and "Traceback" not in cap.err + cap.out
    assert not (tmp_path / "b" / "tcp_ip").exists()


# -- the handler-file parser (no compiler needed) ---------------------------------------------


def test_function_definitions() -> None:
    text = """#include "x.h"
#define M(a) \\
    { a }
/* void commented(rg_hctx *h) { } */
struct s { int a; };
static const int table[] = {1, 2};
void f(const struct f_args *args,
       rg_hctx *h)
{
    if (args) { const char *s = "}{"; (void)s; }
}
static int helper(void) { return '}'; }
int g(void);
extern "C" {
void inside(rg_hctx *h) { }
}
"""
    defs = {d.name: d for d in function_definitions(text)}
    assert set(defs) == {"f", "helper", "inside"}
    assert defs["f"].signature == "void f ( const struct f_args * args , rg_hctx * h )"
    assert defs["f"].line == 7 and not defs["f"].static
    assert defs["helper"].static


def test_check_handlers_normalises_whitespace(tmp_path: Path) -> None:
    proto = "void tcp_data(const struct tcp_data_args *args, rg_hctx *h)"
    f = tmp_path / "h.c"
    f.write_text("void\ntcp_data( const struct tcp_data_args*args,rg_hctx * h ) {}\n")
    assert check_handlers(f, {"tcp_data": proto}) == []
    f.write_text("void tcp_data(struct tcp_data_args *args, rg_hctx *h) {}\n")
    assert len(check_handlers(f, {"tcp_data": proto})) == 1
    assert "missing" in check_handlers(tmp_path / "none.c", {"tcp_data": proto})[0]


def test_cflags_starting_with_dash_o_are_not_the_O_option() -> None:
    from rubikgen.cli.main import _join_cflags, _parser

    argv = ["build", "s.yaml", "-O0", "--cflags", "-O1 -g", "--cc", "gcc"]
    args = _parser().parse_args(_join_cflags(argv))
    assert (args.opt_level, args.cflags, args.cc) == (0, "-O1 -g", "gcc")


def test_untouched_stub_is_refreshed(tmp_path: Path) -> None:
    """A stub rubikgen wrote is replaced when the handlers change; a filled-in file never."""
    from rubikgen.toolchain.build import _untouched_stub

    stub = (
        "/* s_handlers.c - the handlers of stack s (s.yaml).\n *\n * Written once by rubikgen as "
        'stubs; yours to fill in. */\n#include "s_gen.h"\n\n/* s.yaml:3 */\n'
        "void h1(const struct h1_args *args, rg_hctx *h)\n{\n    (void)args;\n    (void)h;\n}\n"
    )
    assert _untouched_stub(stub)
    assert not _untouched_stub(stub.replace("(void)h;", "(void)h;\n    count++;"))
    assert not _untouched_stub(stub + "static int count;\n")


def test_spec_hash_does_not_depend_on_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    """Protocol paths may be relative to the working directory; the hash (and so `check` and
    the rebuild decision) must be the same wherever rubikgen runs."""
    from rubikgen.pipeline import generate

    shutil.copytree(SPECS, tmp_path / "specs")
    stack = tmp_path / "specs" / "stacks" / "tcp_ip.yaml"
    here = generate(str(stack)).spec_hash
    monkeypatch.chdir(tmp_path)
    assert generate(str(stack)).spec_hash == here
    assert generate("specs/stacks/tcp_ip.yaml").spec_hash == here
