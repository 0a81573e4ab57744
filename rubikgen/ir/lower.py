"""Lowering of a checked stack to the CFG IR, following the per-layer pipeline (R8.1):

1. header  2. lookup -> fetch, or create + init  3. prep  4. sequence insert (+ virtual latches,
pre-PSM events)  5. PSM step, fail  6./7. events and handlers in their order  8./9. next layer
(call and return)  10. destroy on accept  11. self-loop.

Statement-level ``if``/``elif``/``else`` become branches, so passes see every command's guard.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rubikgen import specpath
from rubikgen.compose import locate
from rubikgen.expr import parse_expr, parse_stmt
from rubikgen.expr.ast import Binary, Expr, Name, Unary, unparse, walk
from rubikgen.expr.ast import Call as ECall
from rubikgen.models.common import Callback, Transform, expr_text
from rubikgen.models.protocol import ElifStmt, ElseStmt, IfStmt, Protocol
from rubikgen.models.stack import Stack, entries_of
from rubikgen.sema.builtins import CLOSE_REASONS, LIFECYCLE_EVENTS, OVERLAP_VALUES
from rubikgen.sema.stack import DEFAULT_MAX_REPEAT, LayerInfo, StackInfo, lifecycle_hooks
from rubikgen.source import Path, SourceMap

from .nodes import Block, Branch, Call, Cond, Instr, Jump, LayerIR, Program, Return, Src

LINK_KINDS = ("ethernet", "null", "raw_ipv4", "raw_ipv6", "sll", "sll2")


# ---------------------------------------------------------------------------------------------
# Virtual atoms (docs/spec-language.md section 7)


def has_virtual(e: Expr) -> bool:
    return any(isinstance(n, Name) and n.parts[0] == "v" for n in walk(e))


def strip_virtual(e: Expr) -> Expr:
    """The atom's condition on the current packet: v.header.x -> header.x."""
    if isinstance(e, Name):
        return Name(e.parts[1:]) if e.parts[0] == "v" else e
    if isinstance(e, Unary):
        return Unary(e.op, strip_virtual(e.operand))
    if isinstance(e, Binary):
        return Binary(e.op, strip_virtual(e.left), strip_virtual(e.right))
    # other nodes hold no names that can be virtual at this level of use; rebuild generically
    from dataclasses import fields, replace

    kw: dict[str, Any] = {}
    for f in fields(e):
        v = getattr(e, f.name)
        if isinstance(v, tuple):
            kw[f.name] = tuple(strip_virtual(x) if _is_expr(x) else x for x in v)
        elif _is_expr(v):
            kw[f.name] = strip_virtual(v)
    return replace(e, **kw) if kw else e


def _is_expr(x: Any) -> bool:
    from rubikgen.expr.ast import Node

    return isinstance(x, Node)


class AtomTable:
    def __init__(self) -> None:
        self.atoms: list[tuple[Expr, str]] = []
        self._index: dict[str, int] = {}

    def rewrite(self, e: Expr) -> Expr:
        """Replace each virtual atom by a name ``__v.K`` (K its latch index)."""
        if not has_virtual(e):
            return e
        if isinstance(e, Binary) and e.op in ("&&", "||"):
            return Binary(e.op, self.rewrite(e.left), self.rewrite(e.right))
        if isinstance(e, Unary) and e.op == "!" and isinstance(e.operand, Binary):
            if e.operand.op in ("&&", "||"):
                return Unary("!", self.rewrite(e.operand))
        text = unparse(e)
        k = self._index.get(text)
        if k is None:
            k = len(self.atoms)
            self._index[text] = k
            self.atoms.append((strip_virtual(e), text))
        return Name(("__v", str(k)))


# ---------------------------------------------------------------------------------------------
# Resources


def _name_resources(layer: str, bindings: dict[str, str], parts: tuple[str, ...]) -> set[str]:
    p0 = parts[0]
    if p0 in ("input", "payload", "payload_len", "cursor"):
        return {f"HEADER:{layer}"}
    if p0 in ("sdu", "sdu_len", "gap_seq", "gap_len", *OVERLAP_VALUES):
        return {f"SDU:{layer}"}
    if p0 in ("to_active", "to_passive"):
        return {f"INST:{layer}"}
    if p0 == "current_state":
        return {f"STATE:{layer}"}
    if p0 == "__v":
        return {f"SEQ:{layer}", f"INST:{layer}"}
    if p0 == "v":
        return _name_resources(layer, bindings, parts[1:]) | {f"SEQ:{layer}"}
    if len(parts) == 2:
        kind = {"header": "HEADER", "temp": "TEMP", "perm": "PERM", "psm": "FIRED"}.get(p0)
        if p0 == "event":
            kind = "FIRED"
        if p0 == "layout":
            kind = "HEADER"
        return {f"{kind}:{layer}"} if kind else set()
    if len(parts) == 3 and p0 in bindings:
        owner = bindings[p0]
        return {f"{parts[1].upper()}:{owner}"}
    return set()


def expr_reads(layer: str, bindings: dict[str, str], e: Expr | None) -> frozenset[str]:
    out: set[str] = set()
    if e is None:
        return frozenset()
    for n in walk(e):
        if isinstance(n, Name):
            out |= _name_resources(layer, bindings, n.parts)
        elif isinstance(n, ECall) and n.func == "ready_upto":
            out |= {f"SEQ:{layer}", f"INST:{layer}"}
    return frozenset(out)


# ---------------------------------------------------------------------------------------------
# The builder


@dataclass
class _Cursor:
    block: Block


class Lowerer:
    def __init__(self, stack: Stack, info: StackInfo, stack_file: str) -> None:
        self.stack = stack
        self.info = info
        self.stack_dir = os.path.dirname(os.path.abspath(stack_file))
        self.prog = Program(stack.stack)
        self._n = 0

    # -- helpers ----------------------------------------------------------------------------
    def src(self, li: LayerInfo | None, path: Path, what: str) -> Src:
        if li is None:
            return self.stack_src(path, what)
        else:
            smap = li.protocol.smap
            file = specpath.display(li.protocol.file, self.stack_dir)
        return Src(file, smap.pos(path).line, what)

    def stack_src(self, path: Path, what: str) -> Src:
        """Where a stack element is written: the extending stack or a base it composes."""
        sm, q = locate(self._stack_smap, path)
        file = os.path.relpath(os.path.abspath(sm.file), self.stack_dir)
        return Src(file, sm.pos(q).line, what)

    def block(self, layer: str, tag: str, src: Src | None = None) -> Block:
        self._n += 1
        return self.prog.add(Block(f"{layer}.{tag}.{self._n}", layer, src=src))

    @staticmethod
    def emit(b: Block, op: str, layer: str, reads: set[str] | frozenset[str] = frozenset(),
             writes: set[str] | frozenset[str] = frozenset(), src: Src | None = None,
             **args: Any) -> Instr:  # fmt: skip
        ins = Instr(op, layer, args, frozenset(reads), frozenset(writes), src)
        b.instrs.append(ins)
        return ins

    # -- stack ------------------------------------------------------------------------------
    def lower(self, smap: SourceMap, stack_file: str) -> Program:
        self._stack_smap = smap
        self._stack_file = os.path.basename(stack_file)
        info = self.info
        for i, name in enumerate(self.stack.layers):
            if name not in info.layers:
                raise ValueError(f"layer {name} has no checked protocol")
            self.prog.layers[name] = LayerIR(name, i, "")
        for name in self.stack.layers:
            self.lower_layer(info.layers[name])
        self._scan_reads(self.stack.model_dump())
        for model in {
            id(li.protocol.model): li.protocol.model for li in info.layers.values()
        }.values():
            self._scan_reads(model.model_dump(by_alias=True))
        entries = entries_of(self.stack.entry)
        if "*" in entries:
            self.prog.entries = {k: entries["*"] for k in LINK_KINDS}
        else:
            self.prog.entries = dict(entries)
        return self.prog

    def _scan_reads(self, node: Any) -> None:
        """Every name read by any expression or statement value among the model's strings
        (a string that parses as neither reads nothing)."""
        from rubikgen.expr.ast import Assign

        if isinstance(node, dict):
            for v in node.values():
                self._scan_reads(v)
        elif isinstance(node, list | tuple):
            for v in node:
                self._scan_reads(v)
        elif isinstance(node, str):
            try:
                st: Any = parse_stmt(node)
                e: Any = st.value if isinstance(st, Assign) else st
            except Exception:
                try:
                    e = parse_expr(node)
                except Exception:
                    return
            for n in walk(e):
                if isinstance(n, Name):
                    self.prog.read_names.add(n.parts)

    # -- one layer --------------------------------------------------------------------------
    def lower_layer(self, li: LayerInfo) -> None:
        name = li.name
        proto = li.protocol
        m: Protocol = proto.model
        lir = self.prog.layers[name]
        b = li.bindings
        L = name
        atoms = AtomTable()
        self._atoms = atoms
        self._li = li

        enter = self.block(L, "enter", self.src(li, (), f"layer {L} ({proto.name})"))
        lir.entry = enter.name
        self.emit(enter, "enter", L, set(), {f"HEADER:{L}", f"TEMP:{L}", f"FIRED:{L}", f"SDU:{L}"})
        self.emit(
            enter,
            "parse_header",
            L,
            {f"HEADER:{L}"} | {f"HEADER:{x}" for x in b.values()},
            {f"HEADER:{L}", f"SDU:{L}"},
            self.src(li, ("header",), "header"),
        )
        trunc = self.block(L, "trunc")
        self.emit(trunc, "error", L, set(), {"RUNTIME"}, reason="header")
        trunc.term = Return(L)
        after_hdr = self.block(L, "lookup" if proto.has_instance else "prep")
        enter.term = Branch(Cond("parse_ok"), after_hdr.name, trunc.name, L)

        # 2. lookup / create
        cur = after_hdr
        prep = self.block(L, "prep", self.src(li, ("prep",), "prep"))
        if proto.has_instance:
            sel = m.selector
            sel_path: Path = ("selector",)
            reads = {f"HEADER:{L}"} | {f"HEADER:{x}" for x in b.values()}
            reads |= {f"PERM:{x}" for x in b.values()}
            self.emit(cur, "build_key", L, reads, {f"KEY:{L}"}, self.src(li, sel_path, "selector"))
            self.emit(cur, "lookup", L, {f"KEY:{L}", "RUNTIME"}, {f"INST:{L}"})
            found = self.block(L, "found")
            miss = self.block(L, "miss")
            cur.term = Branch(Cond("found"), found.name, miss.name, L)
            self.emit(found, "observe", L, {f"INST:{L}"}, {"RUNTIME"})
            found.term = Jump(prep.name)
            create_if = None if isinstance(sel, list) or sel is None else sel.create_if
            create = self.block(L, "create", self.src(li, ("perm",), "create"))
            noinst = self.block(L, "noinst")
            if create_if is not None:
                e = parse_expr(expr_text(create_if))
                miss.term = Branch(
                    Cond("create_if", e, expr_text(create_if)),
                    create.name,
                    noinst.name,
                    L,
                    expr_reads(L, b, e),
                )
            else:
                miss.term = Jump(create.name)
            self.emit(
                create,
                "create",
                L,
                {f"KEY:{L}", f"HEADER:{L}"},
                {f"INST:{L}", f"PERM:{L}", f"STATE:{L}", f"SEQ:{L}", f"FIRED:{L}", "RUNTIME"},
            )
            self.emit(create, "observe", L, {f"INST:{L}"}, {"RUNTIME"})
            create.term = Jump(prep.name)
            self.emit(noinst, "no_instance", L, set(), {f"INST:{L}", f"PERM:{L}", f"STATE:{L}"})
            noinst.term = Jump(prep.name)
        else:
            self.emit(cur, "no_instance", L, set(), {f"INST:{L}", f"PERM:{L}", f"STATE:{L}"})
            cur.term = Jump(prep.name)

        # 3. prep
        cur = self.stmts(prep, m.prep, ("prep",))

        # 4. sequence insert, virtual latches, pre-PSM events
        if m.sequence is not None:
            ins = self.block(L, "insert", self.src(li, ("sequence",), "sequence"))
            cur.term = Branch(Cond("has_inst"), ins.name, "", L, frozenset({f"INST:{L}"}))
            rd = set()
            for key in ("meta", "data", "data_len", "early"):
                v = getattr(m.sequence, key)
                if v is not None:
                    rd |= expr_reads(L, b, parse_expr(expr_text(v)))
            for w in m.sequence.window or []:
                rd |= expr_reads(L, b, parse_expr(expr_text(w)))
            self.emit(ins, "insert_seq", L, rd | {f"INST:{L}"}, {f"SEQ:{L}", f"FIRED:{L}"})
            self._latch_block = ins
            after_ins = self.block(L, "pre_psm")
            ins.term = Jump(after_ins.name)
            cur.term.else_ = after_ins.name  # type: ignore[union-attr]
            cur = after_ins
        else:
            self._latch_block = None

        order, pre, post = self.event_order(li)
        lir.order = order
        lir.handlers = [h for h in order if h in self.stack.handlers]
        lir.lifecycle = self.lifecycle_order(li)
        for ev in pre:
            cur = self.event(cur, li, ev)

        # 5. PSM
        if m.psm is not None:
            lir.states = list(proto.states)
            lir.start = proto.states.index(_start(m.psm))
            lir.accept = [proto.states.index(s) for s in m.psm.accept or []]
            cur = self.psm(cur, li)

        # 7. events and handlers
        for ev in post:
            cur = self.event(cur, li, ev)

        # virtual latches: every condition is known now; update them right after the insert
        if self._latch_block is not None and atoms.atoms:
            for k, (e, text) in enumerate(atoms.atoms):
                self.emit(
                    self._latch_block,
                    "vupdate",
                    L,
                    expr_reads(L, b, e) | {f"SEQ:{L}"},
                    {f"SEQ:{L}"},
                    atom=k,
                    expr=e,
                    text=text,
                )
        lir.atoms = atoms.atoms

        # 9. next layer: the first matching edge (self-loops are separate, step 11)
        after = self.block(L, "after")
        edges = [(i, e) for i, e in self.info.children.get(L, []) if e.to != L]
        for i, e in edges:
            ep: Path = ("edges", i)
            s = self.stack_src(ep, f"edge {L} -> {e.to}")
            call = self.block(L, f"to_{e.to}", s)
            call.term = Call(e.to, after.name, L)
            self.prog.layers[e.to].callers.append((call.name, after.name))
            if e.when is None:
                cur.term = Jump(call.name)
                cur = self.block(L, "unreachable")
                break
            ex = parse_expr(expr_text(e.when))
            nxt = self.block(L, "edge_else")
            cur.term = Branch(Cond("expr", ex, expr_text(e.when)), call.name, nxt.name, L,
                              expr_reads(L, b, ex))  # fmt: skip
            cur = nxt
        cur.term = Jump(after.name)
        cur = after

        # 11 (decided before 10: the instance may be gone after the destroy)
        loops = [(i, e) for i, e in self.info.children.get(L, []) if e.to == L]
        if loops:
            i, e = loops[0]
            mr = e.max_repeat or DEFAULT_MAX_REPEAT
            ex = parse_expr(expr_text(e.when)) if e.when is not None else None
            # input: the next pass parses this instead of the sdu (written into the sdu when
            # the loop is taken; nothing reads the sdu after this but the destroy and reenter)
            inp = parse_expr(expr_text(e.input)) if e.input is not None else None
            self.emit(
                cur,
                "loop_decide",
                L,
                expr_reads(L, b, ex) | expr_reads(L, b, inp),
                {f"LOOP:{L}"} | ({f"SDU:{L}"} if inp is not None else set()),
                self.stack_src(("edges", i), "self-loop"),
                cond=Cond("expr", ex, expr_text(e.when)) if ex is not None else None,
                max_repeat=mr,
                **({"input": inp} if inp is not None else {}),
            )

        # 10. destroy
        if m.psm is not None and m.psm.accept:
            dst = self.block(L, "destroy")
            nxt = self.block(L, "after_destroy")
            cur.term = Branch(Cond("accept"), dst.name, nxt.name, L,
                              frozenset({f"STATE:{L}", f"INST:{L}"}))  # fmt: skip
            self.emit(dst, "destroy", L, {f"INST:{L}"}, {f"INST:{L}", "RUNTIME"})
            dst.term = Jump(nxt.name)
            cur = nxt
        if loops:
            again = self.block(L, "loop")
            self.emit(again, "reenter", L, {f"SDU:{L}", f"LOOP:{L}"}, {f"HEADER:{L}", f"LOOP:{L}"})
            cur.term = Branch(Cond("loop"), again.name, "", L, frozenset({f"LOOP:{L}"}))
            again.term = Jump(enter.name)
            ret = self.block(L, "return")
            cur.term.else_ = ret.name  # type: ignore[union-attr]
            ret.term = Return(L)
        else:
            cur.term = Return(L)

    # -- statements -------------------------------------------------------------------------
    def stmts(self, cur: Block, stmts: list[Any], path: Path) -> Block:
        li = self._li
        L = li.name
        b = li.bindings
        i = 0
        while i < len(stmts):
            s = stmts[i]
            sp = path + (i,)
            if isinstance(s, str):
                st = parse_stmt(s)
                from rubikgen.expr.ast import Assign, CallStmt

                if isinstance(st, Assign):
                    t = st.target.parts
                    w = _name_resources(L, b, t)
                    self.emit(cur, "assign", L, expr_reads(L, b, st.value), w,
                              self.src(li, sp, s), stmt=st)  # fmt: skip
                elif isinstance(st, CallStmt) and st.func == "assemble":
                    self.emit(cur, "assemble", L, {f"SEQ:{L}", f"INST:{L}"},
                              {f"SEQ:{L}", f"SDU:{L}", f"FIRED:{L}"}, self.src(li, sp, s))  # fmt: skip
                elif isinstance(st, CallStmt) and st.func == "set_sdu":
                    self.emit(cur, "set_sdu", L, expr_reads(L, b, st.args[0]), {f"SDU:{L}"},
                              self.src(li, sp, s), value=st.args[0])  # fmt: skip
                else:
                    raise ValueError(f"unknown statement {s!r}")
                i += 1
            elif isinstance(s, Callback):
                rd: set[str] = set()
                for a in s.args.values():
                    v = a.value if hasattr(a, "value") else a
                    rd |= expr_reads(L, b, parse_expr(expr_text(v)))
                self.emit(cur, "callback", L, rd, {"RUNTIME"},
                          self.src(li, sp, f"callback {s.callback}"), name=s.callback, call=s)  # fmt: skip
                i += 1
            elif isinstance(s, Transform):
                rd = {f"INST:{L}"}
                for v in s.args.values():
                    rd |= expr_reads(L, b, parse_expr(expr_text(v)))
                self.emit(cur, "transform", L, rd, {f"SDU:{L}", f"INST:{L}", "RUNTIME"},
                          self.src(li, sp, f"transform {s.transform}"), name=s.transform,
                          call=s)  # fmt: skip
                i += 1
            elif isinstance(s, IfStmt):
                # an if, its elifs and its else
                chain: list[tuple[Any, list[Any], Path]] = [(s.if_, s.then, sp)]
                j = i + 1
                while j < len(stmts) and isinstance(stmts[j], ElifStmt):
                    chain.append((stmts[j].elif_, stmts[j].then, path + (j,)))
                    j += 1
                else_body: list[Any] | None = None
                else_path = path
                if j < len(stmts) and isinstance(stmts[j], ElseStmt):
                    else_body = stmts[j].else_
                    else_path = path + (j, "else")
                    j += 1
                join = self.block(L, "join")
                for cond, body, cp in chain:
                    ex = self._atoms.rewrite(parse_expr(expr_text(cond)))
                    then = self.block(L, "then", self.src(li, cp, "if"))
                    nxt = self.block(L, "else")
                    cur.term = Branch(Cond("expr", ex, expr_text(cond)), then.name, nxt.name, L,
                                      expr_reads(L, b, ex))  # fmt: skip
                    end = self.stmts(then, body, cp + ("then",))
                    end.term = Jump(join.name)
                    cur = nxt
                if else_body is not None:
                    cur = self.stmts(cur, else_body, else_path)
                cur.term = Jump(join.name)
                cur = join
                i = j
            else:  # a stray elif/else: rejected by the validator
                raise ValueError(f"unexpected statement {s!r}")
        return cur

    # -- PSM --------------------------------------------------------------------------------
    def psm(self, cur: Block, li: LayerInfo) -> Block:
        L = li.name
        b = li.bindings
        psm = li.protocol.model.psm
        assert psm is not None
        states = li.protocol.states
        done = self.block(L, "psm_done")
        step = self.block(L, "psm", self.src(li, ("psm",), "psm"))
        cur.term = Branch(Cond("has_inst"), step.name, done.name, L, frozenset({f"INST:{L}"}))
        cur = step
        for ti, t in enumerate(psm.transitions):
            tp: Path = ("psm", "transitions", ti)
            if isinstance(t.from_, list):
                srcs = list(t.from_)
            elif t.from_ == "*":
                srcs = list(states)
            else:
                srcs = [t.from_]
            st_expr: Expr | None = None
            for s in srcs:
                atom = Binary("==", Name(("current_state",)), Name((s,)))
                st_expr = atom if st_expr is None else Binary("||", st_expr, atom)
            cond = st_expr if t.from_ != "*" else None
            text = f"current_state in {srcs}" if t.from_ != "*" else "any state"
            if t.when is not None:
                w = self._atoms.rewrite(parse_expr(expr_text(t.when)))
                cond = w if cond is None else Binary("&&", cond, w)
                text += f" && {expr_text(t.when)}"
            fire = self.block(L, f"t_{t.name}", self.src(li, tp, f"transition {t.name}"))
            self.emit(fire, "set_state", L, set(), {f"STATE:{L}", f"FIRED:{L}"},
                      state=states.index(t.to), transition=ti + 1, name=t.name)  # fmt: skip
            end = self.stmts(fire, t.do, tp + ("do",))
            end.term = Jump(done.name)
            if cond is None:
                cur.term = Jump(fire.name)
                cur = self.block(L, "unreachable")
                break
            nxt = self.block(L, "t_else")
            cur.term = Branch(Cond("expr", cond, text), fire.name, nxt.name, L,
                              expr_reads(L, b, cond))  # fmt: skip
            cur = nxt
        self.emit(cur, "fail", L, {f"STATE:{L}"}, {f"FIRED:{L}", f"STATE:{L}", "RUNTIME"},
                  self.src(li, ("psm", "on_fail"), "on_fail"), policy=psm.on_fail,
                  start=states.index(_start(psm)))  # fmt: skip
        if psm.on_fail == "drop":
            cur.term = Return(L)
        else:
            cur.term = Jump(done.name)
        return done

    # -- events -----------------------------------------------------------------------------
    def event_order(self, li: LayerInfo) -> tuple[list[str], list[str], list[str]]:
        """Protocol events and the layer's handlers in run order: declaration order, moved
        only as `before`/`with` require (Kahn's algorithm, ties by declaration)."""
        m = li.protocol.model
        nodes: list[str] = list(m.events)
        rel: dict[str, tuple[list[str], Any]] = {
            n: (list(e.before), e.with_) for n, e in m.events.items()
        }
        for hn, h in self.stack.handlers.items():
            if h.layer == li.name and not lifecycle_hooks(h.with_):
                nodes.append(hn)
                rel[hn] = (list(h.before), h.with_)
        after: dict[str, set[str]] = {n: set() for n in nodes}  # n runs after these
        # the built-in `gap` is raised by assemble(): `with: gap` runs after every event
        # whose actions assemble
        assembling = {n for n, e in m.events.items() if "assemble(" in e.model_dump_json()}
        for n, (before, with_) in rel.items():
            for x in before:
                if x in after:
                    after[x].add(n)
            for x in [with_] if isinstance(with_, str) else (with_ or []):
                if x in after:
                    after[n].add(x)
                if x == "gap":
                    after[n] |= assembling - {n}
        order: list[str] = []
        left = list(nodes)
        while left:
            for n in left:
                if after[n] <= set(order):
                    order.append(n)
                    left.remove(n)
                    break
            else:  # a cycle: rejected by the validator
                raise ValueError(f"cyclic event order among {left}")
        pre = [n for n in order if n in m.events and m.events[n].phase == "pre_psm"]
        post = [n for n in order if n not in pre]
        return order, pre, post

    def lifecycle_order(self, li: LayerInfo) -> list[tuple[str, tuple[str, ...]]]:
        """The layer's lifecycle handlers with the close reasons each runs for (every event of
        its `with` raised), in declaration order, those hooked on an event more specific than
        `destroyed` (timeout, evicted) first: `destroyed` comes last for every end."""
        out: list[tuple[int, str, tuple[str, ...]]] = []
        for hn, h in self.stack.handlers.items():
            hooks = lifecycle_hooks(h.with_)
            if h.layer != li.name or not hooks:
                continue
            reasons = [r for r, _c, _v in CLOSE_REASONS]
            for w in hooks:
                reasons = [r for r in reasons if r in LIFECYCLE_EVENTS[w]]
            specific = any(len(LIFECYCLE_EVENTS[w]) < len(CLOSE_REASONS) for w in hooks)
            out.append((0 if specific else 1, hn, tuple(reasons)))
        out.sort(key=lambda t: t[0])  # stable: declaration order within each group
        return [(hn, reasons) for _g, hn, reasons in out]

    def event(self, cur: Block, li: LayerInfo, name: str) -> Block:
        L = li.name
        b = li.bindings
        m = li.protocol.model
        if name in m.events:
            ev = m.events[name]
            path: Path = ("events", name)
            when, with_, do = ev.when, ev.with_, ev.do
            s = self.src(li, path, f"event {name}")
        else:
            h = self.stack.handlers[name]
            path = ("handlers", name)
            when, with_, do = h.when, h.with_, None
            s = self.stack_src(path, f"handler {name}")
        cond: Expr | None = None
        text = []
        for w in [with_] if isinstance(with_, str) else (with_ or []):
            atom = Name(("event", w))
            cond = atom if cond is None else Binary("&&", cond, atom)
            text.append(f"event.{w}")
        if when is not None:
            we = self._atoms.rewrite(parse_expr(expr_text(when)))
            cond = we if cond is None else Binary("&&", cond, we)
            text.append(expr_text(when))
        body = self.block(L, f"ev_{name}", s)
        join = self.block(L, f"ev_{name}_done")
        if cond is None:
            cur.term = Jump(body.name)
        else:
            cur.term = Branch(Cond("expr", cond, " && ".join(text)), body.name, join.name, L,
                              expr_reads(L, b, cond))  # fmt: skip
        self.emit(body, "fire", L, set(), {f"FIRED:{L}"}, event=name)
        if do is None:
            rd: set[str] = set()
            for a in self.stack.handlers[name].args.values():
                v = a.value if hasattr(a, "value") else a
                rd |= expr_reads(L, b, parse_expr(expr_text(v)))
            self.emit(body, "handler", L, rd, {"RUNTIME"}, s, name=name)
            end = body
        else:
            end = self.stmts(body, do, path + ("do",))
        end.term = Jump(join.name)
        return join


def _start(psm: Any) -> str:
    return psm.start[0] if isinstance(psm.start, list) else psm.start


def lower_stack(stack: Stack, info: StackInfo, smap: SourceMap, stack_file: str) -> Program:
    # a branch whose arm was never filled in names block "": verify() reports it
    return Lowerer(stack, info, stack_file).lower(smap, stack_file)


__all__ = ["LINK_KINDS", "Lowerer", "lower_stack"]
