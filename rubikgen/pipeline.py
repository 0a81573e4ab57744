"""The compilation object: one stack through load → check → lower → optimise → emit.

Each stage runs at most once, when something first asks for its result, and is cached on the
object, so a command that needs the stack's name, its files and its generated C reads and
checks the specs once (before, `rubikgen build` parsed the stack file three times, `run` four,
and `check` after an -O1 build checked the stack twice); `rubikgen validate` checks many files
in one workspace instead (rubikgen/front/validate.py). The compile stage
(`rubikgen.toolchain.build.build_compilation`) takes the object. Spec errors raise `GenerateError` with the diagnostics of the check stage
(a rules file given with `rules=` is checked there too, with the stack);
`diagnostics` holds every diagnostic (warnings too) once the check ran.

    comp = Compilation("specs/stacks/tcp_ip.yaml", opt_level=2)
    comp.stack_name  # load only
    comp.resolved  # load, check, and every expression of every layer typed and bound
    comp.program  # ... lower, optimise
    comp.generated  # ... and the C back-end
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from rubikgen.front import specpath
from rubikgen.front.diagnostics import Diagnostic
from rubikgen.front.document import Document
from rubikgen.front.workspace import Workspace
from rubikgen.models import Stack

if TYPE_CHECKING:
    from rubikgen.backend.emit import Generated
    from rubikgen.ir import Program
    from rubikgen.ir.rules import RuleSet
    from rubikgen.opt import OptResult
    from rubikgen.sema.model import Resolution
    from rubikgen.sema.stack_info import StackInfo


@dataclass(frozen=True)
class Options:
    """How the middle-end runs: the -O level, passes skipped, passes whose IR is kept, and
    whether the IR verifier runs after every pass (the tests and `--check-ir` set it)."""

    opt_level: int = 2
    disable: tuple[str, ...] = ()
    dump_after: tuple[str, ...] = ()
    check_ir: bool = False


class Compilation:
    """One stack compiled with one set of options; stages run lazily, once."""

    def __init__(
        self,
        stack_path: str | os.PathLike[str],
        *,
        opt_level: int = 2,
        disable: Iterable[str] = (),
        dump_after: Iterable[str] = (),
        check_ir: bool | None = None,
        timings: dict[str, float] | None = None,
        workspace: Workspace | None = None,
        rules: str | os.PathLike[str] | None = None,
        rules_reload: bool = False,
    ) -> None:
        self.stack_path = str(stack_path)
        self.rules_path = str(rules) if rules is not None else None  # compiled in (docs/rules.md)
        self.rules_reload = rules_reload  # rule sets swappable at run time (backend/rules_so.py)
        if check_ir is None:  # a debugging switch for every build of a session (tests, CI)
            check_ir = os.environ.get("RUBIKGEN_CHECK_IR", "") not in ("", "0")
        self.options = Options(opt_level, tuple(disable), tuple(dump_after), check_ir)
        # seconds per phase, keyed and ordered as `--timings` prints them
        self.timings: dict[str, float] = timings if timings is not None else {}
        self.workspace = workspace if workspace is not None else Workspace()
        self._lower_seconds = 0.0
        self._rules: RuleSet | None = None  # set by the check stage

    def with_options(self, *, opt_level: int) -> Compilation:
        """The same stack at another -O level, sharing the loaded and checked documents (the
        IR is lowered again: passes change it in place)."""
        other = Compilation(
            self.stack_path,
            opt_level=opt_level,
            disable=self.options.disable,
            dump_after=self.options.dump_after,
            check_ir=self.options.check_ir,
            workspace=self.workspace,
            rules=self.rules_path,
            rules_reload=self.rules_reload,
        )
        if "document" in self.__dict__:
            other.__dict__["document"] = self.document
        if "checked" in self.__dict__:
            other.__dict__["checked"] = self.checked
            other._rules = self._rules
        return other

    # -- load ----------------------------------------------------------------------------------
    @cached_property
    def document(self) -> Document:
        """The stack file parsed and validated against the models (extends composed)."""
        t0 = time.perf_counter()
        doc = self.workspace.load(self.stack_path)
        self._lower_seconds += time.perf_counter() - t0
        return doc

    @property
    def stack_name(self) -> str:
        """The `stack:` name (the file name stem when the file cannot be read as a stack)."""
        model = self.document.model
        return model.stack if isinstance(model, Stack) else Path(self.stack_path).stem

    def spec_files(self) -> list[Path]:
        """The stack file, the stacks it extends and the protocol files its layers name (those
        that exist): the inputs a build depends on."""
        path = Path(self.stack_path)
        doc = self.document
        files = [path] + [Path(s) for s in doc.sources[1:]]
        model = doc.model
        if isinstance(model, Stack):
            base = os.path.dirname(os.path.abspath(path))
            files += [
                Path(r.path)
                for r in (specpath.resolve(x.protocol, base) for x in model.layers.values())
                if r.path
            ]
        if self.rules_path is not None:
            files.append(Path(self.rules_path))
        return [f for f in files if f.is_file()]

    # -- check ---------------------------------------------------------------------------------
    @cached_property
    def checked_document(self) -> Document:
        """The document checked like `rubikgen validate` whatever its kind (a protocol too),
        errors or not: they are in `diagnostics` (`rubikgen graph` draws what it can)."""
        return self.workspace.check(self.stack_path)

    @cached_property
    def checked(self) -> Document:
        """The stack checked like `rubikgen validate` (GenerateError on errors)."""
        from rubikgen.front.diagnostics import GenerateError

        t0 = time.perf_counter()
        doc = self.workspace.check_stack(self.stack_path)
        errors = [d for d in self.diagnostics if d.severity == "error"]
        if errors or doc.kind != "stack" or doc.stack_info is None:
            if not errors:
                errors = doc.diags or [
                    Diagnostic("RG001", f"'{self.stack_path}' is not a stack", doc.path, 1, 1)
                ]
            raise GenerateError(errors)
        self._rules = self._check_rules(doc.stack_info)
        self._lower_seconds += time.perf_counter() - t0
        return doc

    def _check_rules(self, info: StackInfo) -> RuleSet | None:
        """The rules file (`--rules`) loaded and checked against the stack's semantic model,
        with the stack (GenerateError on errors; docs/rules.md); None without one."""
        if self.rules_path is None:
            return None
        from rubikgen.front.diagnostics import GenerateError
        from rubikgen.rules.check import StackFields, check, load

        loaded, diags = load(self.rules_path)
        rules = None
        if loaded is not None and not any(d.severity == "error" for d in diags):
            sf = StackFields.of_model(self.stack_name, info)
            rules, diags = check(loaded, sf, self.rules_reload)
        if rules is None:
            raise GenerateError(diags)
        return rules

    @property
    def rules(self) -> RuleSet | None:
        """The checked rule set of `--rules` (the check stage's), None without a rules file."""
        _ = self.checked
        return self._rules

    @cached_property
    def resolved(self) -> Resolution:
        """The semantic model of the checked stack: every expression, statement and name of
        every layer typed and bound in its layer's scope, once (sema/resolve.py). Lowering, the
        passes and the back-ends read it through the IR; nothing after this stage calls sema."""
        from rubikgen.sema.resolve import resolve_stack

        doc = self.checked
        if not isinstance(doc.model, Stack):  # `checked` lets stacks through only
            raise TypeError(f"{doc.path} is not a stack")
        t0 = time.perf_counter()
        res = resolve_stack(doc.model, self.stack_info, doc.smap)
        self._lower_seconds += time.perf_counter() - t0
        return res

    @property
    def stack_info(self) -> StackInfo:
        """The checked stack's layers and bindings (`checked` raises when there are none)."""
        info = self.checked.stack_info
        assert info is not None  # `checked` raised otherwise
        return info

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """Every diagnostic of the documents loaded so far, sorted, without duplicates."""
        return self.workspace.all_diagnostics()

    # -- lower ---------------------------------------------------------------------------------
    @cached_property
    def lowered(self) -> Program:
        """The checked stack lowered to verified IR (not optimised yet: `program` optimises this
        same object in place)."""
        from rubikgen.ir import lower_stack, prune, verify

        res = self.resolved
        doc = self.checked
        assert isinstance(doc.model, Stack)  # `resolved` checked it
        t0 = time.perf_counter()
        prog = lower_stack(doc.model, self.stack_info, doc.smap, doc.abspath, res)
        prune(prog)
        problems = verify(prog)
        if problems:
            raise RuntimeError("IR verification failed: " + "; ".join(problems[:5]))
        self._lower_seconds += time.perf_counter() - t0
        self.timings["check+lower"] = self._lower_seconds
        return prog

    # -- optimise ------------------------------------------------------------------------------
    @cached_property
    def optimised(self) -> OptResult:
        """The middle-end's run over `lowered` (PassError for an unknown pass name)."""
        from rubikgen.opt import optimize

        o = self.options
        prog = self.lowered
        res = optimize(
            prog, o.opt_level, disable=o.disable, dump_after=o.dump_after, check=o.check_ir
        )
        for r in res.records:
            self.timings[f"pass {r.name}"] = self.timings.get(f"pass {r.name}", 0.0) + r.seconds
        return res

    @cached_property
    def program(self) -> Program:
        """The optimised IR, with the rules file's rules lowered into it (after the passes:
        ir/lower_rules.py)."""
        from rubikgen.ir import lower_rules
        from rubikgen.ir.rules import RulesDesc

        _ = self.optimised
        prog = self.lowered
        if self.rules_path is not None or self.rules_reload:  # reloadable: a set or none yet
            spec = os.path.abspath(self.stack_path) if self.rules_reload else ""
            lower_rules(prog, RulesDesc(self.rules, self.rules_reload, spec))
        return prog

    # -- emit ----------------------------------------------------------------------------------
    @cached_property
    def generated(self) -> Generated:
        """The C files, handler stubs and declarations of the optimised program."""
        from rubikgen.backend.emit import generate_c, spec_hash

        prog = self.program
        doc = self.checked
        t0 = time.perf_counter()
        files = list(doc.sources) + [li.protocol.file for li in self.stack_info.layers.values()]
        level = self.options.opt_level
        if self.rules_path is not None:
            files.append(self.rules_path)
        hash_ = spec_hash(files, level)
        if self.rules_reload:
            from rubikgen.backend.rules_so import reload_hash

            gen = generate_c(prog, reload_hash(hash_), level)
        else:
            gen = generate_c(prog, hash_, level)
        gen.dumps = self.optimised.dumps
        self.timings["C back-end"] = time.perf_counter() - t0
        return gen


__all__ = ["Compilation", "Options"]


def generate(
    stack_path: str,
    *,
    opt_level: int = 2,
    disable: tuple[str, ...] = (),
    dump_after: tuple[str, ...] = (),
    timings: dict[str, float] | None = None,
) -> Generated:
    """The generated C of a stack (GenerateError when its specs have errors): one compilation
    up to the back-end, for callers that want the files without compiling them."""
    comp = Compilation(
        stack_path, opt_level=opt_level, disable=disable, dump_after=dump_after, timings=timings
    )
    return comp.generated
