"""C renderers of the protocol state machine and events (SetState, Fire, Fail)."""

from __future__ import annotations

from rubikgen.ir import instrs as I

from ..context import CContext
from ..layer_c import LayerC
from .registry import C


@C.register(I.SetState)
def set_state(ins: I.SetState, lc: LayerC, cx: CContext) -> str:
    n = lc.name
    t = ins.transition
    # tmask is only read by the close's `complete` test, through the setup mask: the
    # other transitions' bits are never looked at
    keep = t <= 64 and (lc.setup_mask >> (t - 1)) & 1
    mask = f"inst_{n}->tmask |= UINT64_C(1) << {t - 1};\n" if keep else ""
    return (
        f"inst_{n}->fi.state = {ins.state}; /* -> {lc.states[ins.state]} */\n"
        f"psm_{n} = {t}; /* {ins.name} */\n" + mask
    ).rstrip()


@C.register(I.Fire)
def fire(ins: I.Fire, lc: LayerC, cx: CContext) -> str:
    return f"ev_{lc.name}[{lc.ev_index(ins.event)}] = 1;"


@C.register(I.Fail)
def fail(ins: I.Fail, lc: LayerC, cx: CContext) -> str:
    n = lc.name
    s = f"ev_{n}[{lc.ev_index('fail')}] = 1; /* on_fail: {ins.policy} */"
    if ins.policy == "reset":
        s += f"\ninst_{n}->fi.state = {ins.start};"
    return s
