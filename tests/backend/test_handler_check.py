"""The handler lifecycle: `build` runs the handler check before compiling, `check` lists
argument changes, `stubs [--append]` writes stubs, renames are recognised.

Real builds with the real compiler on a private copy of specs/ (the repository's specs are never
modified); each test edits the stock tcp_ip stack's handlers the way a user would.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.cli import main
from rubikgen.toolchain.build import HandlerError, build, check
from rubikgen.toolchain.handlercheck import HandlerSig, arg_changes, renames

ROOT = REPO_ROOT
CAPTURE = ROOT / "captures" / "raw-ipv4-ipv6-http.pcap"
UDP_DATA = (
    '  udp_data:  {layer: udp,  args: {data: sdu, sport: "header.sport", dport: "header.dport"}}'
)
TCP_DATA = (
    '  tcp_data:  {layer: tcp,  with: asm, when: "sdu_len > 0", '
    'args: {data: sdu, sport: "header.sport", dport: "header.dport"}}'
)


@pytest.fixture
def stack(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    path = tmp_path / "specs" / "stacks" / "tcp_ip.yaml"
    assert UDP_DATA in path.read_text() and TCP_DATA in path.read_text()
    return path


def _edit(path: Path, old: str, new: str) -> int:
    """Replaces old by new in path; returns the 1-based line of the edit."""
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return text[: text.index(old)].count("\n") + 1


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """rubikgen in a subprocess, stderr merged into stdout (to see what comes first)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "rubikgen", *args],
        env=env,
        capture_output=False,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )


def test_a_new_handler_stops_the_build_and_stubs_append_adds_it(stack: Path, tmp_path: Path):
    out = tmp_path / "b"
    first = build(stack, out, quiet=True)
    hfile = out / "tcp_ip_handlers.c"
    # the handlers with a data argument read it (ICMP handlers have none)
    mine = re.sub(r"(/\* [^\n]*data \(rg_bytes\)[^\n]*\*/\nvoid [^\n]*\n\{\n    )\(void\)args;",
                  r"\1(void)args->data;", hfile.read_text()) + "/* mine */\n"  # fmt: skip
    hfile.write_text(mine)
    line = _edit(stack, UDP_DATA, UDP_DATA + '\n  udp_len:  {layer: udp, args: {n: "sdu_len"}}')
    stamp = (out / "tcp_ip.stamp").read_text()
    proc = _cli("build", str(stack), "-o", str(out))
    assert proc.returncode == 1
    # spec terms: where the handler is declared, what it takes, what to do; no compiler output
    assert f"tcp_ip.yaml:{line + 1}:3: error: handler 'udp_len' (layer udp, n: u32)" in proc.stdout
    assert f"rubikgen stubs {stack} --append -o {out}" in proc.stdout
    assert "-std=c11" not in proc.stdout and "undefined" not in proc.stdout, proc.stdout
    assert (out / "tcp_ip.stamp").read_text() == stamp  # nothing compiled
    assert first.binary.is_file()

    proc = _cli("stubs", str(stack), "--append", "-o", str(out))
    assert proc.returncode == 0, proc.stdout
    assert "udp_len" in proc.stdout
    text = hfile.read_text()
    assert text.startswith(mine)  # the user's part byte for byte
    added = text[len(mine) :]
    assert re.findall(r"^void (\w+)\(", added, re.M) == ["udp_len"]
    # appending again adds nothing
    assert main(["stubs", str(stack), "--append", "-o", str(out)]) == 0
    assert hfile.read_text() == text
    res = build(stack, out, quiet=True)
    assert res.rebuilt
    proc = subprocess.run(
        [res.binary, CAPTURE, "--nf", "count", "--out", tmp_path / "o"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def test_argument_changes_are_listed_and_a_removed_argument_in_use_is_an_error(
    stack: Path, tmp_path: Path
):
    out = tmp_path / "b"
    build(stack, out, quiet=True)
    hfile = out / "tcp_ip_handlers.c"
    stub = hfile.read_text()
    new = TCP_DATA.replace('sport: "header.sport", dport: "header.dport"', "")
    new = new.replace(
        "args: {data: sdu, }", 'args: {data: sdu, dport: "header.seq", seq: "header.seq"}'
    )
    line = _edit(stack, TCP_DATA, new)
    expect = f"tcp_ip.yaml:{line}:3: note: handler 'tcp_data': arguments changed: +seq -sport dport: u16 -> u32"
    problems = check(stack, out)
    assert any(p.endswith(expect) for p in problems), problems
    # the stub reads no argument: the build goes on, the note comes before the compiler command
    proc = _cli("build", str(stack), "-o", str(out))
    assert proc.returncode == 0, proc.stdout
    assert expect in proc.stdout
    assert proc.stdout.index(expect) < proc.stdout.index("-std=c11")
    # after the build the last build's arguments are the spec's: nothing to report
    assert check(stack, out) == []

    # a handler that reads an argument the spec no longer passes: stopped, with the reason
    _edit(stack, new, TCP_DATA)
    build(stack, out, quiet=True)
    hfile.write_text(stub.replace("(void)args;", "(void)args->sport;", 1))
    _edit(stack, TCP_DATA, new)
    with pytest.raises(HandlerError) as e:
        build(stack, out, quiet=True)
    msgs = [str(f) for f in e.value.findings if f.severity == "error"]
    assert len(msgs) == 1 and "reads args->sport, which the stack no longer passes" in msgs[0]
    assert msgs[0].startswith(f"{hfile}:")


def test_a_renamed_handler_is_recognised(stack: Path, tmp_path: Path):
    out = tmp_path / "b"
    build(stack, out, quiet=True)
    hfile = out / "tcp_ip_handlers.c"
    # the handlers with a sport argument read it (ICMP conversations' handlers have none)
    hfile.write_text(re.sub(r"(/\* [^\n]*sport \(uint16_t\)[^\n]*\*/\nvoid [^\n]*\n\{\n    )"
                            r"\(void\)args;", r"\1(void)args->sport;", hfile.read_text()))  # fmt: skip
    _edit(stack, UDP_DATA, UDP_DATA.replace("udp_data: ", "dgram_seen:"))
    with pytest.raises(HandlerError) as e:
        build(stack, out, quiet=True)
    errors = [str(f) for f in e.value.findings]
    new_missing = [m for m in errors if "'dgram_seen' (renamed from 'udp_data'?)" in m]
    old_stale = [m for m in errors if "'udp_data' looks like a handler" in m]
    assert len(new_missing) == 1 and len(old_stale) == 1, errors
    assert "renamed to 'dgram_seen'" in old_stale[0]
    assert "move the body of 'udp_data'" in new_missing[0]
    # the user renames the function (and its struct): builds again
    text = hfile.read_text().replace("udp_data", "dgram_seen")
    hfile.write_text(text)
    assert build(stack, out, quiet=True).rebuilt


def test_stubs_writes_a_fresh_file_only_where_none_exists(stack: Path, tmp_path: Path, capsys):
    from rubikgen.pipeline import generate

    target = tmp_path / "h" / "my_handlers.c"
    assert main(["stubs", str(stack), "--handlers", str(target)]) == 0
    assert target.read_text() == generate(str(stack)).handlers_stub
    target.write_text("/* mine */\n")
    capsys.readouterr()
    assert main(["stubs", str(stack), "--handlers", str(target)]) == 1
    assert "--append" in capsys.readouterr().err
    assert target.read_text() == "/* mine */\n"


def test_rename_and_argument_diff_rules():
    sig = HandlerSig("udp_data", "udp", (("data", "bytes"), ("sport", "u16")))
    same = HandlerSig("payload", "udp", sig.args)
    other = HandlerSig("udp_data2", "tcp", (("len", "u32"),))
    # the same layer and arguments win over a close name
    assert renames({"udp_data": sig}, {"payload": same, "udp_data2": other}) == {
        "udp_data": "payload"
    }
    # otherwise a close name (difflib), and nothing for an unrelated one
    assert renames({"udp_data": sig}, {"udp_data2": other}) == {"udp_data": "udp_data2"}
    assert renames({"udp_data": None}, {"zzz": other}) == {}
    newer = HandlerSig("udp_data", "udp", (("data", "bytes"), ("sport", "u32"), ("seq", "u32")))
    assert arg_changes(sig, newer) == "+seq sport: u16 -> u32"
    assert arg_changes(sig, sig) == ""


@pytest.mark.parametrize("stack", sorted((ROOT / "specs" / "stacks").glob("*.yaml")), ids=str)
def test_the_last_build_is_read_back_from_its_header(stack: Path) -> None:
    """The argument diff reads the handlers of the last build from its S_gen.h: that must give
    back what the stack declares (names, layers, argument names and types)."""
    from rubikgen.pipeline import generate
    from rubikgen.toolchain.handlercheck import header_sigs

    gen = generate(str(stack))
    back = header_sigs(gen.files[f"{gen.stack}_gen.h"])
    assert {n: (s.layer, s.args) for n, s in back.items()} == {
        n: (s.layer, s.args) for n, s in gen.handler_sigs.items()
    }
