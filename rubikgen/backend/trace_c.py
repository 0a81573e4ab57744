"""The packet trace's hooks in the per-packet function (`rubikgen ctl SOCK trace N`).

Each hook is a macro of the runtime's rg/rg_trace.h (RG_TRACE_LAYER, RG_TRACE_PSM, ...) that
expands to nothing unless the stack is compiled with -DRG_TRACE (`rubikgen build|run
--trace`), so one generated text serves both builds. They are written here, around the
instructions of the per-packet function only (process_body): the burst stage reuses some of
the same renderers and must not trace. The sequence insert's and the assemble's hooks need
their renderers' locals and are written there (c/seq.py)."""

from __future__ import annotations

from rubikgen.ir import instrs as I
from rubikgen.ir.nodes import Block, Instr

from .context import CContext
from .layer_c import LayerC, c_string


def before(ins: Instr, lc: LayerC, b: Block, cx: CContext) -> list[str]:
    """The hook written before an instruction (the state it changes, read first)."""
    n, i = lc.name, lc.index
    if isinstance(ins, I.SetState):
        where = f"{b.src.file}:{b.src.line}" if b.src else ""
        return [
            f"RG_TRACE_PSM({i}, inst_{n}->fi.state, {ins.state}, {c_string(ins.name)}, "
            f"{c_string(where)});"
        ]
    if isinstance(ins, I.Fail):
        return [f"RG_TRACE_FAIL({i}, inst_{n}->fi.state, {c_string(ins.policy)});"]
    if isinstance(ins, I.Destroy):
        return [f"RG_TRACE_DESTROY({i});"]
    if isinstance(ins, (I.Handler, I.Callback)):
        return [f"RG_TRACE_CALL({i}, {list(cx.handlers).index(ins.name)});"]
    return []


def after(ins: Instr, lc: LayerC, cx: CContext) -> list[str]:
    """The hook written after an instruction (what it found or did)."""
    n, i = lc.name, lc.index
    if isinstance(ins, I.Enter):
        return [f"RG_TRACE_LAYER({i}, in_{n}.ptr, in_{n}.len);"]
    if isinstance(ins, I.ParseHeader):
        return [f"RG_TRACE_PARSED({i}, err_{n});"]
    if isinstance(ins, I.Lookup):
        return [
            f"RG_TRACE_FOUND({i}, inst_{n} != NULL ? &inst_{n}->fi : NULL, dir_{n}, {lc.key_len});"
        ]
    if isinstance(ins, I.Create):
        return [f"RG_TRACE_CREATED({i}, has_inst_{n} ? &inst_{n}->fi : NULL, {lc.key_len});"]
    if isinstance(ins, I.NoInstance) and lc.has_instance:
        return [f"RG_TRACE_NOINST({i});"]
    return []


def block_start(b: Block, cx: CContext) -> list[str]:
    """An event's block: the event is raised (its handlers follow)."""
    if b.src is None or not b.src.what.startswith("event "):
        return []
    lc = cx.layers[b.layer]
    return [f"RG_TRACE_EVENT({lc.index}, {c_string(b.src.what.removeprefix('event '))});"]


def begin() -> str:
    return "    RG_TRACE_BEGIN(entry, data, caplen, ts_ns, ctx->pkt_no);"


def end() -> str:
    return "    RG_TRACE_END(rc, ctx->verdict.v);"


def note(lc: LayerC, what: str) -> str:
    return f"    RG_TRACE_NOTE({lc.index}, {c_string(what)});"
