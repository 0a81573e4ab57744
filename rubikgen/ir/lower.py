"""Lowering of a checked stack to the CFG IR, following the per-layer pipeline (R8.1):

1. header  2. lookup -> fetch, or create + init  3. prep  4. sequence insert (+ virtual latches,
pre-PSM events)  5. PSM step, fail  6./7. events and handlers in their order  8./9. next layer
(call and return)  10. destroy on accept  11. self-loop.

Statement-level ``if``/``elif``/``else`` become branches, so passes see every command's guard.
"""

from __future__ import annotations

import os
from dataclasses import fields, replace
from typing import Any

from rubikgen.expr import build as X
from rubikgen.expr.ast import Binary, Expr, Name, Node, Unary, unparse, walk
from rubikgen.expr.ast import Call as ECall
from rubikgen.expr.types import BOOL, Resolved
from rubikgen.front import specpath
from rubikgen.front.compose import locate
from rubikgen.front.source import Path, SourceMap
from rubikgen.models.common import Callback, Transform, TypedArg, expr_text
from rubikgen.models.protocol import ElifStmt, ElseStmt, IfStmt, Protocol
from rubikgen.models.stack import Stack, entries_of
from rubikgen.sema.builtins import (
    BUILTIN_VALUE_TABLE,
    CLOSE_REASONS,
    LIFECYCLE_EVENTS,
    lifecycle_hooks,
)
from rubikgen.sema.model import LayerModel, Origin, Resolution
from rubikgen.sema.stack_info import DEFAULT_MAX_REPEAT, LayerInfo, StackInfo
from rubikgen.sema.transforms import TRANSFORMS, user_reasons

from . import instrs as I
from .describe import describe_layer
from .layout import Arg, HandlerDesc, StackDesc
from .nodes import LINK_KINDS, Block, Branch, Call, Cond, Instr, Jump, LayerIR, Program, Return, Src

# ---------------------------------------------------------------------------------------------
# Virtual atoms (docs/spec-language.md section 7)


def has_virtual(e: Expr) -> bool:
    return any(isinstance(n, Name) and n.parts[0] == "v" for n in walk(e))


def strip_virtual(e: Expr) -> Expr:
    """The atom's condition on the current packet: v.header.x -> header.x."""
    if isinstance(e, Name):
        if e.parts[0] != "v":
            return e
        ref = replace(e.ref, virtual=False) if e.ref is not None else None
        return replace(e, parts=e.parts[1:], ref=ref)
    kw: dict[str, Any] = {}
    for f in fields(e):
        v = getattr(e, f.name)
        if isinstance(v, tuple):
            kw[f.name] = tuple(strip_virtual(x) if _is_expr(x) else x for x in v)
        elif _is_expr(v):
            kw[f.name] = strip_virtual(v)
    return replace(e, **kw) if kw else e


def _is_expr(x: Any) -> bool:
    return isinstance(x, Node)


_ATOM = Resolved(BOOL, "atom")  # __v.K: the latch of virtual atom K


class AtomTable:
    def __init__(self) -> None:
        self.atoms: list[tuple[Expr, str]] = []
        self._index: dict[str, int] = {}

    def rewrite(self, e: Expr) -> Expr:
        """Replace each virtual atom by a name ``__v.K`` (K its latch index)."""
        if not has_virtual(e):
            return e
        if isinstance(e, Binary) and e.op in ("&&", "||"):
            return replace(e, left=self.rewrite(e.left), right=self.rewrite(e.right))
        if isinstance(e, Unary) and e.op == "!" and isinstance(e.operand, Binary):
            if e.operand.op in ("&&", "||"):
                return replace(e, operand=self.rewrite(e.operand))
        text = unparse(e)
        k = self._index.get(text)
        if k is None:
            k = len(self.atoms)
            self._index[text] = k
            self.atoms.append((strip_virtual(e), text))
        return X.name(("__v", str(k)), _ATOM)


# ---------------------------------------------------------------------------------------------
# Resources


# Where each built-in value lives (docs/spec-language.md section 2): sema's table.
_BUILTIN_KIND = {n: v.resource for n, v in BUILTIN_VALUE_TABLE.items()}
# What each kind of binding (expr.types.Resolved.kind) reads or writes; states and options are
# constants.
_KIND = {
    "field": "HEADER",
    "layout": "HEADER",
    "temp": "TEMP",
    "perm": "PERM",
    "foreign_field": "HEADER",
    "foreign_temp": "TEMP",
    "foreign_perm": "PERM",
    "transition": "FIRED",
    "event": "FIRED",
}


def name_resources(layer: str, n: Name) -> set[str]:
    """The resources a name of ``layer`` reads (or, as an assignment target, writes), from
    the binding sema gave it."""
    r = n.ref
    if r is None:
        raise ValueError(f"layer {layer}: name {n.dotted!r} was not resolved by sema")
    if r.kind == "atom":  # a virtual atom's latch asks the sequence
        return {f"SEQ:{layer}", f"INST:{layer}"}
    kind = _BUILTIN_KIND.get(n.parts[-1]) if r.kind == "builtin" else _KIND.get(r.kind)
    out = {f"{kind}:{r.owner or layer}"} if kind else set()
    if r.virtual:
        out.add(f"SEQ:{layer}")
    return out


def expr_reads(layer: str, e: Expr | None) -> frozenset[str]:
    out: set[str] = set()
    if e is None:
        return frozenset()
    for n in walk(e):
        if isinstance(n, Name):
            out |= name_resources(layer, n)
        elif isinstance(n, ECall) and n.func == "ready_upto":
            out |= {f"SEQ:{layer}", f"INST:{layer}"}
    return frozenset(out)


# ---------------------------------------------------------------------------------------------
# The builder


class Lowerer:
    def __init__(self, stack: Stack, info: StackInfo, stack_file: str, res: Resolution) -> None:
        self.stack = stack
        self.info = info
        self.stack_dir = os.path.dirname(os.path.abspath(stack_file))
        self.prog = Program(stack.stack)
        # sema's typed expressions, by the path each is written at: lowering copies them into
        # the IR, the back-end renders them
        self.model: dict[str, LayerModel] = dict(res.layers)
        self.limits = res.limits
        self.prog.read_names = set(res.read_names)
        self._n = 0

    # -- helpers ----------------------------------------------------------------------------
    def src(self, li: LayerInfo | None, path: Path, what: str) -> Src:
        if li is None:
            return self.stack_src(path, what)
        else:
            smap = li.protocol.smap
            file = specpath.display(li.protocol.file, self.stack_dir)
        return Src(file, smap.pos(path).line, what)

    def stack_src(self, path: Path, what: str, key: bool = False) -> Src:
        """Where a stack element is written: the extending stack or a base it composes (with
        `key`, the line of its name rather than of its value)."""
        sm, q = locate(self._stack_smap, path)
        file = os.path.relpath(os.path.abspath(sm.file), self.stack_dir)
        return Src(file, (sm.key_pos(q) if key else sm.pos(q)).line, what)

    def block(self, layer: str, tag: str, src: Src | None = None) -> Block:
        self._n += 1
        return self.prog.add(Block(f"{layer}.{tag}.{self._n}", layer, src=src))

    @staticmethod
    def emit(b: Block, op: type[Instr], layer: str, reads: set[str] | frozenset[str] = frozenset(),
             writes: set[str] | frozenset[str] = frozenset(), src: Src | None = None,
             params: Any = (), **args: Any) -> Instr:  # fmt: skip
        """Appends an instruction: its class's declared effects (ir/instrs.py, `params` the
        layers the protocol's parameters are bound to) plus `reads`/`writes`, its operands'."""
        ins = op.make(layer, params=params, reads=reads, writes=writes, src=src, **args)
        b.instrs.append(ins)
        return ins

    # -- stack ------------------------------------------------------------------------------
    def stack_desc(self, smap: SourceMap, display: str) -> StackDesc:
        """Handlers, positions and the runtime's tables, for the back-end."""
        d = StackDesc(
            self._stack_file,
            close_reasons=CLOSE_REASONS,
            transforms=dict(TRANSFORMS),
            user_reasons=user_reasons(),
            limits=self.limits,
        )
        for hn, h in self.stack.handlers.items():
            x = self.model[h.layer]
            hp: Path = ("handlers", hn)
            pos = smap.key_pos(hp)
            d.handlers[hn] = HandlerDesc(
                hn,
                h.layer,
                call_args(x, h.args, hp + ("args",), "stack"),
                x.stack_expr(hp + ("when",)) if h.when is not None else None,
                str(self.stack_src(("handlers", hn), "")),
                smap.pos(("handlers", hn)).line,
                f"{display}:{pos.line}:{pos.col}",
                tuple([h.with_] if isinstance(h.with_, str) else (h.with_ or [])),
            )
        d.udes = {n: u.layer for n, u in self.stack.events.items()}
        for name in self.stack.layers:
            pos = smap.key_pos(("layers", name))
            d.layer_where[name] = f"{display}:{pos.line}:{pos.col}"
        d.parents = {e.from_ for e in self.stack.edges}
        return d

    def lower(self, smap: SourceMap, stack_file: str, display: str | None = None) -> Program:
        self._stack_smap = smap
        self._stack_file = os.path.basename(stack_file)
        info = self.info
        for i, name in enumerate(self.stack.layers):
            if name not in info.layers:
                raise ValueError(f"layer {name} has no checked protocol")
            self.prog.layers[name] = LayerIR(name, i, "")
        for name in self.stack.layers:
            self.lower_layer(info.layers[name])
        for name in self.stack.layers:
            li = info.layers[name]
            used = {
                i.name
                for b in self.prog.blocks.values()
                if b.layer == name
                for i in b.instrs
                if isinstance(i, I.Transform)
            }
            spec_file = specpath.display(li.protocol.file, self.stack_dir)
            desc = describe_layer(li, self.model[name], spec_file, used)
            self.prog.layers[name].desc = desc
            # record fields are read at the close: their stores are live (dead-stores)
            self.prog.read_names |= {("perm", v) for v in desc.records}
        self.prog.desc = self.stack_desc(smap, display or stack_file)
        entries = entries_of(self.stack.entry)
        if "*" in entries:
            self.prog.entries = _single_entry(entries["*"], info.layers[entries["*"]])
        else:
            self.prog.entries = dict(entries)
        return self.prog

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
        self._x: LayerModel = self.model[L]

        enter = self.block(L, "enter", self.src(li, (), f"layer {L} ({proto.name})"))
        lir.entry = enter.name
        self.emit(enter, I.Enter, L)
        self.emit(enter, I.ParseHeader, L, src=self.src(li, ("header",), "header"),
                  params=b.values())  # fmt: skip
        trunc = self.block(L, "trunc")
        self.emit(trunc, I.Error, L, reason="header")
        trunc.term = Return(L)
        after_hdr = self.block(L, "lookup" if proto.has_instance else "prep")
        enter.term = Branch(Cond("parse_ok"), after_hdr.name, trunc.name, L)

        # 2. lookup / create
        cur = after_hdr
        prep = self.block(L, "prep", self.src(li, ("prep",), "prep"))
        if proto.has_instance:
            sel = m.selector
            sel_path: Path = ("selector",)
            self.emit(cur, I.BuildKey, L, src=self.src(li, sel_path, "selector"), params=b.values())
            self.emit(cur, I.Lookup, L)
            found = self.block(L, "found")
            miss = self.block(L, "miss")
            cur.term = Branch(Cond("found"), found.name, miss.name, L)
            self.emit(found, I.Observe, L)
            found.term = Jump(prep.name)
            create_if = None if isinstance(sel, list) or sel is None else sel.create_if
            create = self.block(L, "create", self.src(li, ("perm",), "create"))
            noinst = self.block(L, "noinst")
            if create_if is not None:
                e = self._x.expr(sel_path + ("create_if",))
                miss.term = Branch(
                    Cond("create_if", e, expr_text(create_if)),
                    create.name,
                    noinst.name,
                    L,
                    expr_reads(L, e),
                )
            else:
                miss.term = Jump(create.name)
            self.emit(create, I.Create, L)
            self.emit(create, I.Observe, L)
            create.term = Jump(prep.name)
            self.emit(noinst, I.NoInstance, L)
            noinst.term = Jump(prep.name)
        else:
            self.emit(cur, I.NoInstance, L)
            if m.lookup is not None:
                table = b[m.lookup.table]
                others = [x for p, x in b.items() if p != m.lookup.table]
                src = self.src(li, ("lookup",), f"lookup in {table}")
                self.emit(cur, I.FindFlow, L, src=src, params=others, table=table)
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
                    rd |= expr_reads(L, self._x.expr(("sequence", key)))
            for wi, _w in enumerate(m.sequence.window or []):
                rd |= expr_reads(L, self._x.expr(("sequence", "window", wi)))
            self.emit(ins, I.InsertSeq, L, rd)
            self._latch_block = ins
            after_ins = self.block(L, "pre_psm")
            ins.term = Jump(after_ins.name)
            cur.term.else_ = after_ins.name  # type: ignore[union-attr]
            cur = after_ins
        else:
            self._latch_block = None
        if m.framing is not None:
            # the next unit of the input becomes the sdu; the bytes after it are the payload
            fb = self.block(L, "frame", self.src(li, ("framing",), "framing"))
            cur.term = Jump(fb.name)
            self.emit(fb, I.Frame, L)
            cur = self.block(L, "framed")
            fb.term = Jump(cur.name)

        order, pre, post = self.event_order(li)
        lir.order = order
        lir.handlers = [h for h in order if h in self.stack.handlers]
        lir.lifecycle = self.lifecycle_order(li)
        lir.late = self.late_handlers(L, lir.handlers)
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
                self.emit(self._latch_block, I.VUpdate, L, expr_reads(L, e), atom=k, expr=e,
                          text=text)  # fmt: skip
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
            ex = self._x.stack_expr(ep + ("when",))
            nxt = self.block(L, "edge_else")
            cur.term = Branch(Cond("expr", ex, expr_text(e.when)), call.name, nxt.name, L,
                              expr_reads(L, ex))  # fmt: skip
            cur = nxt
        cur.term = Jump(after.name)
        cur = after

        # 11 (decided before 10: the instance may be gone after the destroy)
        loops = [(i, e) for i, e in self.info.children.get(L, []) if e.to == L]
        if loops:
            i, e = loops[0]
            mr = e.max_repeat or DEFAULT_MAX_REPEAT
            ex = self._x.stack_expr(("edges", i, "when")) if e.when is not None else None
            # input: the next pass parses this instead of the sdu (written into the sdu when
            # the loop is taken; nothing reads the sdu after this but the destroy and reenter)
            inp = self._x.stack_expr(("edges", i, "input")) if e.input is not None else None
            self.emit(
                cur,
                I.LoopDecide,
                L,
                expr_reads(L, ex) | expr_reads(L, inp),
                {f"SDU:{L}"} if inp is not None else set(),
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
            self.emit(dst, I.Destroy, L)
            dst.term = Jump(nxt.name)
            cur = nxt
        if loops:
            again = self.block(L, "loop")
            self.emit(again, I.Reenter, L)
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
        i = 0
        while i < len(stmts):
            s = stmts[i]
            sp = path + (i,)
            if isinstance(s, str):
                st = self._x.stmt(sp)
                from rubikgen.expr.ast import Assign, CallStmt

                if isinstance(st, Assign):
                    w = name_resources(L, st.target)
                    self.emit(cur, I.Assign, L, expr_reads(L, st.value), w,
                              self.src(li, sp, s), stmt=st)  # fmt: skip
                elif isinstance(st, CallStmt) and st.func == "assemble":
                    self.emit(cur, I.Assemble, L, src=self.src(li, sp, s))
                elif isinstance(st, CallStmt) and st.func == "set_sdu":
                    self.emit(cur, I.SetSdu, L, expr_reads(L, st.args[0]), src=self.src(li, sp, s),
                              value=st.args[0])  # fmt: skip
                else:
                    raise ValueError(f"unknown statement {s!r}")
                i += 1
            elif isinstance(s, Callback):
                args = call_args(self._x, s.args, sp + ("args",))
                rd: set[str] = set()
                for a in args:
                    rd |= expr_reads(L, a.expr)
                self.emit(cur, I.Callback, L, rd, src=self.src(li, sp, f"callback {s.callback}"),
                          name=s.callback, args=args)  # fmt: skip
                i += 1
            elif isinstance(s, Transform):
                targs = {an: self._x.expr(sp + ("args", an)) for an in s.args}
                rd = set()
                for v in targs.values():
                    rd |= expr_reads(L, v)
                self.emit(cur, I.Transform, L, rd, src=self.src(li, sp, f"transform {s.transform}"),
                          name=s.transform, args=targs)  # fmt: skip
                i += 1
            elif isinstance(s, IfStmt):
                # an if, its elifs and its else
                chain: list[tuple[Any, list[Any], Path, str]] = [(s.if_, s.then, sp, "if")]
                j = i + 1
                while j < len(stmts) and isinstance(stmts[j], ElifStmt):
                    chain.append((stmts[j].elif_, stmts[j].then, path + (j,), "elif"))
                    j += 1
                else_body: list[Any] | None = None
                else_path = path
                if j < len(stmts) and isinstance(stmts[j], ElseStmt):
                    else_body = stmts[j].else_
                    else_path = path + (j, "else")
                    j += 1
                join = self.block(L, "join")
                for cond, body, cp, kw in chain:
                    ex = self._atoms.rewrite(self._x.expr(cp + (kw,)))
                    then = self.block(L, "then", self.src(li, cp, "if"))
                    nxt = self.block(L, "else")
                    cur.term = Branch(Cond("expr", ex, expr_text(cond)), then.name, nxt.name, L,
                                      expr_reads(L, ex))  # fmt: skip
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
                atom = X.binary("==", self._x.name(("current_state",)), self._x.name((s,)))
                st_expr = atom if st_expr is None else X.binary("||", st_expr, atom)
            cond = st_expr if t.from_ != "*" else None
            text = f"current_state in {srcs}" if t.from_ != "*" else "any state"
            if t.when is not None:
                w = self._atoms.rewrite(self._x.expr(tp + ("when",)))
                cond = w if cond is None else X.binary("&&", cond, w)
                text += f" && {expr_text(t.when)}"
            fire = self.block(L, f"t_{t.name}", self.src(li, tp, f"transition {t.name}"))
            self.emit(fire, I.SetState, L, state=states.index(t.to), transition=ti + 1, name=t.name)  # fmt: skip
            end = self.stmts(fire, t.do, tp + ("do",))
            end.term = Jump(done.name)
            if cond is None:
                cur.term = Jump(fire.name)
                cur = self.block(L, "unreachable")
                break
            nxt = self.block(L, "t_else")
            cur.term = Branch(Cond("expr", cond, text), fire.name, nxt.name, L,
                              expr_reads(L, cond))  # fmt: skip
            cur = nxt
        self.emit(cur, I.Fail, L, src=self.src(li, ("psm", "on_fail"), "on_fail"), policy=psm.on_fail,
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
        # user-defined events on this layer, in declaration order: after their base
        for un in [n for n, u in self.stack.events.items() if u.layer == li.name]:
            ev = self.stack.events[un]
            nodes.append(un)
            rel[un] = (list(ev.before), ev.base)
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

    def late_handlers(self, L: str, handlers: list[str]) -> list[str]:
        """The handlers a late packet of a lingering instance runs, in run order: it runs no
        prep, sequence, PSM or event, so only a handler hooked on no event (every packet of the
        layer) whose `when` and args read only the headers, perm variables, the state and the
        direction judges and rewrites it as the live instance's packets (issue 27)."""
        out = []
        for hn in handlers:
            h = self.stack.handlers[hn]
            if h.with_:
                continue
            hp: Path = ("handlers", hn)
            rd: set[str] = set()
            if h.when is not None:
                rd |= expr_reads(L, self._x.stack_expr(hp + ("when",)))
            for an, a in h.args.items():
                rd |= expr_reads(L, self._x.stack_expr(arg_path(hp + ("args",), an, a)))
            if all(r.split(":")[0] in _LATE_READS for r in rd):
                out.append(hn)
        return out

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

    def _fired(self, w: str) -> Expr:
        if w in self.stack.handlers or w in self.stack.events:
            return _fired_name(w)
        return self._x.name(("event", w))

    def event(self, cur: Block, li: LayerInfo, name: str) -> Block:
        L = li.name
        m = li.protocol.model
        if name in m.events:
            ev = m.events[name]
            path: Path = ("events", name)
            origin: Origin = "protocol"
            when, with_, do = ev.when, ev.with_, ev.do
            s = self.src(li, path, f"event {name}")
        elif name in self.stack.events:  # a UDE: its base event's flag and its filter
            u = self.stack.events[name]
            path, origin = ("events", name), "stack"
            when, with_, do = u.when, u.base, []
            s = self.stack_src(path, f"event {name} (on: {u.on})", key=True)
        else:
            h = self.stack.handlers[name]
            path, origin = ("handlers", name), "stack"
            when, with_, do = h.when, h.with_, None
            s = self.stack_src(path, f"handler {name}")
        cond: Expr | None = None
        text = []
        for w in [with_] if isinstance(with_, str) else (with_ or []):
            atom = self._fired(w)
            cond = atom if cond is None else X.binary("&&", cond, atom)
            text.append(f"event.{w}")
        if when is not None:
            we = self._atoms.rewrite(self._x.expr(path + ("when",), origin))
            cond = we if cond is None else X.binary("&&", cond, we)
            text.append(expr_text(when))
        body = self.block(L, f"ev_{name}", s)
        join = self.block(L, f"ev_{name}_done")
        if cond is None:
            cur.term = Jump(body.name)
        else:
            cur.term = Branch(Cond("expr", cond, " && ".join(text)), body.name, join.name, L,
                              expr_reads(L, cond))  # fmt: skip
        self.emit(body, I.Fire, L, event=name)
        if do is None:
            rd: set[str] = set()
            for an, a in self.stack.handlers[name].args.items():
                rd |= expr_reads(L, self._x.stack_expr(arg_path(path + ("args",), an, a)))
            self.emit(body, I.Handler, L, rd, src=s, name=name)
            end = body
        else:
            end = self.stmts(body, do, path + ("do",))
        end.term = Jump(join.name)
        return join


# what a late packet has (lower.late_handlers): its headers, the lingering instance's perm
# variables, state and key (direction)
_LATE_READS = ("HEADER", "PERM", "STATE", "INST")


def _fired_name(w: str) -> Name:
    """`event.W` for a handler or UDE of the stack: the layer's scope knows only its protocol's
    events, but every name in the layer's event order has a fired flag."""
    r = Resolved(BOOL, "event")
    return Name(("event", w), type=BOOL, ref=r)


def _start(psm: Any) -> str:
    return psm.start[0] if isinstance(psm.start, list) else psm.start


def arg_path(at: Path, name: str, a: Any) -> Path:
    """Where sema resolved argument ``name`` of the args at ``at`` (a TypedArg: its value)."""
    return at + (name, "value") if isinstance(a, TypedArg) else at + (name,)


def call_args(
    x: LayerModel, args: dict[str, Any], at: Path, origin: Origin = "protocol"
) -> list[Arg]:
    """A handler's or callback's arguments (at ``at``), typed (a TypedArg declares its type)."""
    out = []
    for an, a in args.items():
        v = a.value if isinstance(a, TypedArg) else a
        declared = a.type if isinstance(a, TypedArg) else None
        out.append(Arg(an, x.expr(arg_path(at, an, a), origin), declared, expr_text(v).strip()))
    return out


def lower_stack(
    stack: Stack,
    info: StackInfo,
    smap: SourceMap,
    stack_file: str,
    res: Resolution,
    display: str | None = None,
) -> Program:
    """Lower a valid stack; ``res``: its semantic model (`Compilation.resolved`), which
    lowering reads and never computes; ``display``: the stack's path as diagnostics show it
    (default ``stack_file``)."""
    # a branch whose arm was never filled in names block "": verify() reports it
    return Lowerer(stack, info, stack_file, res).lower(smap, stack_file, display)


# The link kind a link-layer protocol of the stock library parses, by protocol name.
_LINK_OF_PROTOCOL = {
    "eth": "ethernet",
    "sll": "sll",
    "sll2": "sll2",
    "loopback": "null",
    "ip": "raw_ipv4",
    "ipv6": "raw_ipv6",
    "ppp_frame": "ppp",
}


def _single_entry(layer: str, li: LayerInfo) -> dict[str, str]:
    """`entry: LAYER`: a layer of a link-layer protocol (eth, sll, ...) is the entry for its own
    link type only, so that a capture of another link type is skipped with a warning naming the
    entries instead of being parsed as that protocol (issue 26: 0 flows and no word); a layer
    of any other protocol stays the entry for every link type."""
    kind = _LINK_OF_PROTOCOL.get(li.protocol.model.protocol)
    return {kind: layer} if kind else {k: layer for k in LINK_KINDS}


__all__ = ["LINK_KINDS", "Lowerer", "lower_stack"]
