"""The eBPF renderers of the IR's instructions and terminators, for a layer rendered block by
block (program.py). Each layer is a program of its own, and a call, a return or a self-loop
is a tail call (RGX_JUMP) to the program that goes on, with the place to resume at in the
scratch record: the verifier checks one layer at a time, and the kernel bounds the chain (33
tail calls: a packet that needs more is deferred). The model: every instance a packet looks up is fresh (created by this
packet, in its start state), which is what user space sees for the one-packet instances of
the stateless path (an unfragmented IPv4 datagram); where the outcome could differ (a layer
whose edges read its PSM, events or sequence ends the packet in a state that outlives it: a
fragment), the packet is deferred to user space (RGX_DEFER)."""

from __future__ import annotations

from rubikgen.ir import instrs as I
from rubikgen.ir.nodes import Block, Branch, Call, Done, Jump, Return

from ..cexpr import stmt_to_c
from ..context import label
from ..layer_c import LayerC
from .header import Header
from .registry import EBPF
from .xcontext import Unlowerable, XContext, XEnv, cond_bpf, to_bpf


def header_lines(lc: LayerC, cx: XContext) -> list[str]:
    """Parse the header; on success the sdu is what follows it and the flow key is taken
    (program.py's hook; the rules' copies: RuleRead, rules.py)."""
    n = lc.name
    out = Header(lc).code()
    out.append(f"HE_{n}:")
    out.append(f"if (err_{n} == 0) {{")
    out.append(f"    sdu_{n} = rg_bytes_make(in_{n}.ptr + cur_{n}, in_{n}.len - cur_{n});")
    if n in cx.flow_layers:
        out.append(f"    RGX_KEY_{n}();")
    out.append("}")
    return out


@EBPF.register(I.Enter)
def enter(ins: I.Enter, lc: LayerC, cx: XContext) -> str:
    n = lc.name
    return (
        f"__builtin_memset(&h_{n}, 0, sizeof h_{n}); __builtin_memset(&t_{n}, 0, sizeof t_{n});\n"
        f"__builtin_memset(ev_{n}, 0, sizeof ev_{n});\n"
        f"psm_{n} = 0; cur_{n} = 0; err_{n} = 0; loop_{n} = 0; has_inst_{n} = 0; dir_{n} = 0;\n"
        f"seqm_{n} = 0; sdu_{n} = rg_bytes_empty();"
    )


@EBPF.register(I.ParseHeader)
def parse_header(ins: I.ParseHeader, lc: LayerC, cx: XContext) -> str:
    return "\n".join(header_lines(lc, cx))


@EBPF.register(I.Error, I.BuildKey, I.Observe, I.Handler, I.Callback, I.Finish, I.Destroy)
def nothing(ins: I.Instr, lc: LayerC, cx: XContext) -> str:
    # counters, user handlers and instance tables are user space's: XDP_PASS hands the
    # packet to it, and a handler's verdict is its own (docs/xdp.md)
    return f"/* {ins.op}: user space */"


@EBPF.register(I.Lookup)
def lookup(ins: I.Lookup, lc: LayerC, cx: XContext) -> str:
    return f"found_{lc.name} = 0; /* fresh-instance model */"


@EBPF.register(I.Create)
def create(ins: I.Create, lc: LayerC, cx: XContext) -> str:
    n = lc.name
    out = [f"has_inst_{n} = 1; inst_{n}->fi.state = {lc.start_state};"]
    if "created" in lc.events:
        out.append(f"ev_{n}[{lc.ev_index('created')}] = 1;")
    env = XEnv(lc, ins.src)
    for v in lc.d.perms.values():
        if v.init is not None and v.target is not None:
            from rubikgen.expr.ast import Assign

            out.append(stmt_to_c(Assign(v.target, v.init), env))
    return "\n".join(out)


@EBPF.register(I.NoInstance)
def no_instance(ins: I.NoInstance, lc: LayerC, cx: XContext) -> str:
    return f"has_inst_{lc.name} = 0;"


@EBPF.register(I.Assign)
def assign(ins: I.Assign, lc: LayerC, cx: XContext) -> str:
    try:
        return stmt_to_c(ins.stmt, XEnv(lc, ins.src))
    except ValueError as x:
        raise Unlowerable(str(x), ins.src) from None


@EBPF.register(I.SetSdu)
def set_sdu(ins: I.SetSdu, lc: LayerC, cx: XContext) -> str:
    return f"sdu_{lc.name} = {to_bpf(ins.value, lc, ins.src).text};"


@EBPF.register(I.InsertSeq)
def insert_seq(ins: I.InsertSeq, lc: LayerC, cx: XContext) -> str:
    sq = lc.d.seq
    if sq is None:
        raise Unlowerable(f"layer {lc.name}: a sequence insert without a sequence", ins.src)
    n = lc.name
    meta = to_bpf(sq.meta, lc, ins.src).text
    data = to_bpf(sq.data, lc, ins.src).text
    return f"seqm_{n} = {meta}; seqd_{n} = {data};"


@EBPF.register(I.VUpdate)
def vupdate(ins: I.VUpdate, lc: LayerC, cx: XContext) -> str:
    # a virtual latch over the sequence: with one packet in it, the packet's own value
    return f"va_{lc.name}[{ins.atom}] = ({cond_bpf(ins.expr, lc, ins.src)}) ? 1 : 0;"


@EBPF.register(I.Assemble)
def assemble(ins: I.Assemble, lc: LayerC, cx: XContext) -> str:
    return XEnv(lc, ins.src).assemble()


@EBPF.register(I.SetState)
def set_state(ins: I.SetState, lc: LayerC, cx: XContext) -> str:
    n = lc.name
    return f"psm_{n} = {ins.transition}; inst_{n}->fi.state = {ins.state}; /* {ins.name} */"


@EBPF.register(I.Fire)
def fire(ins: I.Fire, lc: LayerC, cx: XContext) -> str:
    return f"ev_{lc.name}[{lc.ev_index(ins.event)}] = 1;"


@EBPF.register(I.Fail)
def fail(ins: I.Fail, lc: LayerC, cx: XContext) -> str:
    return "RGX_DEFER(); /* no transition: the fail policy is user space's */"


@EBPF.register(I.LoopDecide)
def loop_decide(ins: I.LoopDecide, lc: LayerC, cx: XContext) -> str:
    n = lc.name
    c = ins.cond
    s = (
        f"loop_{n} = 1;"
        if c is None or c.expr is None
        else (f"loop_{n} = ({cond_bpf(c.expr, lc, ins.src)}) ? 1 : 0;")
    )
    src = to_bpf(ins.input, lc, ins.src).text if ins.input is not None else f"sdu_{n}"
    return s + f"\nlin_{n} = {src};"


@EBPF.register(I.Reenter)
def reenter(ins: I.Reenter, lc: LayerC, cx: XContext) -> str:
    # the next pass through the layer's own program (a jump back would be a loop the
    # verifier walks once per repeat, multiplied by every loop below)
    n = lc.name
    return f"in_{n} = lin_{n};\nrep_{n}++;\nresume_{n} = 0;\nRGX_JUMP({cx.prog_id.get(n, 0)});"


# -- terminators: (t, block, cx) -> lines ---------------------------------------------------


def cond(cx: XContext, t: Branch, lc: LayerC) -> str:
    n, c = lc.name, t.cond
    if c.kind == "parse_ok":
        return f"err_{n} == 0"
    if c.kind == "found":
        return f"found_{n}"
    if c.kind == "has_inst":
        return f"has_inst_{n}"
    if c.kind == "accept":
        acc = " || ".join(f"inst_{n}->fi.state == {s}" for s in lc.d.accept) or "0"
        return f"has_inst_{n} && ({acc})"
    if c.kind == "loop":
        return f"loop_{n} && rep_{n} < {cx.max_repeat.get(n, 0)}u"
    assert c.expr is not None
    return cond_bpf(c.expr, lc, None)


@EBPF.register(Jump)
def jump(t: Jump, b: Block, cx: XContext) -> list[str]:
    return [f"goto {label(t.target)};"]


@EBPF.register(Branch)
def branch(t: Branch, b: Block, cx: XContext) -> list[str]:
    c = cond(cx, t, cx.layers[t.layer])
    return [f"if ({c}) goto {label(t.then)};", f"goto {label(t.else_)};"]


def state_check(cx: XContext, layer: str) -> list[str]:
    """A layer whose edges read its state, left in a state that outlives the packet: what
    user space does with it depends on earlier packets."""
    if layer not in cx.stateful or not cx.kids.get(layer, set()) & cx.rendered:
        return []  # nothing rendered below: the state decides nothing the program sees
    lc = cx.layers[layer]
    acc = " || ".join(f"inst_{layer}->fi.state == {s}" for s in lc.d.accept) or "0"
    return [f"if (has_inst_{layer} && !({acc})) RGX_DEFER();"]


@EBPF.register(Call)
def call(t: Call, b: Block, cx: XContext) -> list[str]:
    if t.child not in cx.rendered:
        # nothing the program needs lies below: the packet's deepest flow is unknown here
        return [
            f"rgx_s->deep = 1; /* {t.child}: not in the XDP program */",
            f"goto {label(t.ret)};",
        ]
    k = ret_id(cx, t.child, b.name)
    return [
        *state_check(cx, t.layer),
        f"in_{t.child} = sdu_{t.layer};",
        f"ret_{t.child} = {k};",
        f"rep_{t.child} = 0;",
        f"resume_{t.child} = 0;",
        f"RGX_JUMP({cx.prog_id.get(t.child, 0)});",
    ]


def ret_id(cx: XContext, child: str, block: str) -> int:
    for i, (c, _r) in enumerate(cx.prog.layers[child].callers):
        if c == block:
            return i + 1
    raise AssertionError(f"{block} is no caller of {child}")


def return_to_caller(cx: XContext, layer: str) -> list[str]:
    lir = cx.prog.layers[layer]
    out = [*state_check(cx, layer), f"switch (ret_{layer}) {{"]
    for i, (c, ret) in enumerate(lir.callers):
        p = cx.prog.blocks[c].layer
        if p in cx.full:
            r = cx.resume_id(p, ret)
            out.append(f"case {i + 1}: resume_{p} = {r}; RGX_JUMP({cx.prog_id.get(p, 0)});")
    out.append("default: RGX_DONE();")
    out.append("}")
    return out


@EBPF.register(Return)
def return_(t: Return, b: Block, cx: XContext) -> list[str]:
    return return_to_caller(cx, t.layer)


@EBPF.register(Done)
def done(t: Done, b: Block, cx: XContext) -> list[str]:
    return ["RGX_DONE();"]


UNLOWERABLE = (I.FindFlow, I.Transform)
