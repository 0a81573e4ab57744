"""Rule sets swapped while a stack runs (docs/rules.md, reload): a rules file compiled to a
shared object for a stack (backend/rules_so.py), and the requests of
`rubikgen ctl SOCKET rules info|reload R.yaml` (runtime-c/main/rg_rules_load.c)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rubikgen.front.diagnostics import Diagnostic


@dataclass
class Compiled:
    so: Path | None
    fingerprint: str
    diagnostics: list[Diagnostic]
    error: str = ""


def compile_so(stack_path: str, rules_path: str, out_dir: Path, cc: str = "cc") -> Compiled:
    """The rules file checked against the stack and compiled into out_dir/rules.so (a unit of
    rubikgen/backend/rules_so.py). Diagnostics (file:line:col) when the rules have errors."""
    from rubikgen.backend.context import build
    from rubikgen.backend.rules_so import RulesHost
    from rubikgen.front.diagnostics import GenerateError
    from rubikgen.ir import lower_rules
    from rubikgen.ir.rules import RulesDesc
    from rubikgen.pipeline import Compilation
    from rubikgen.rules.check import StackFields, check, load
    from rubikgen.toolchain.build import BASE_CFLAGS, RUNTIME_DIR

    comp = Compilation(stack_path, opt_level=0)
    try:
        prog = comp.lowered  # the interface (fingerprint) is the same at every -O level
    except GenerateError as e:
        return Compiled(None, "", list(e.diagnostics), "the stack has errors")
    loaded, diags = load(rules_path)
    rs = None
    if loaded is not None and not any(d.severity == "error" for d in diags):
        rs, diags = check(
            loaded, StackFields.of_model(comp.stack_name, comp.stack_info), reloadable=True
        )
    if rs is None:
        return Compiled(None, "", diags, "the rules file has errors")
    lower_rules(prog, RulesDesc(rs, reload=True, stack_spec=os.path.abspath(stack_path)))
    cx = build(prog, "0", comp.options.opt_level)
    host = cx.rules
    assert isinstance(host, RulesHost)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / "rules.c"
    src.write_text(host.unit_.source(), encoding="utf-8")
    so = out_dir / "rules.so"
    cmd = [cc, *BASE_CFLAGS, "-fPIC", "-shared", "-fvisibility=hidden",
           f"-I{RUNTIME_DIR / 'include'}", str(src), "-o", str(so)]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return Compiled(
            None, host.itf.fingerprint(), [], "cannot compile the rule set:\n" + p.stderr
        )
    return Compiled(so, host.itf.fingerprint(), [])


def request(sock_path: str, fields: list[str], timeout: float = 30.0) -> tuple[bool, str]:
    """One request on the control socket (runtime-c/main/rg_control.c: a line of
    tab-separated fields; the reply "ok\n..." or "error: ..."): (ok, the text after the
    status line)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        s.sendall(("\t".join(fields) + "\n").encode())
        chunks = []
        while b := s.recv(65536):
            chunks.append(b)
    head, _, rest = b"".join(chunks).decode(errors="replace").partition("\n")
    if head == "ok":
        return True, rest
    return False, head.removeprefix("error: ") if head else "no reply (the run ended?)"


def info(sock: str, timeout: float = 30.0) -> dict[str, str]:
    """`rules info` of a running binary: stack, fingerprint, rules, nrules, reloads, packets.
    RuntimeError with the binary's message when it cannot reload."""
    ok, text = request(sock, ["rules", "info"], timeout)
    if not ok:
        raise RuntimeError(text)
    return dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)


def reload(
    sock: str, rules_path: str, timeout: float = 30.0, cc: str = "cc"
) -> tuple[bool, str, list[Diagnostic]]:
    """Compile rules_path for the binary behind sock and have it swap it in. (ok, the binary's
    reply or why not, diagnostics of the rules file)."""
    try:
        got = info(sock, timeout)
    except RuntimeError as e:
        return False, str(e), []
    # the binary loads rule sets from its --rules-path only (the build's own directory unless
    # given): compile into a private directory there (docs/operating.md)
    where = got.get("rules_path", "").split(":")[0] or None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".rubikgen-rules-", dir=where))
    except OSError as e:
        return False, f"cannot compile into {where}: {e} (the rules in force are kept)", []
    try:
        c = compile_so(got["stack"], rules_path, tmp, cc)
        if c.so is None:
            return False, c.error + " (the rules in force are kept)", c.diagnostics
        if c.fingerprint != got.get("fingerprint"):
            return False, (
                f"{got['stack']} changed since the binary was built (rule sets compiled from it "
                "no longer fit the binary): rebuild and restart it; the rules in force are kept"
            ), []  # fmt: skip
        ok, text = request(sock, ["rules", "load", str(c.so)], timeout)
        return ok, text, []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the binary has it mapped already
