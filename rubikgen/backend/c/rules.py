"""The C of the rules' opcodes (ir/instrs.py RuleRead, RuleKey, ApplyRules; docs/rules.md):
what each renders is the program's rules back-end's (`cx.rules`: compiled in, rules_c.py, or
reloadable, rules_so.py), which also renders what is written once per stack (context fields,
tables, support functions)."""

from __future__ import annotations

from rubikgen.ir import instrs as I

from ..context import CContext
from ..layer_c import LayerC
from .registry import C


@C.register(I.RuleRead)
def rule_read(ins: I.RuleRead, lc: LayerC, cx: CContext) -> str:
    assert cx.rules is not None, "a rule opcode in a program without rules"
    return cx.rules.on_parsed(lc.name, ins.fields)


@C.register(I.RuleKey)
def rule_key(ins: I.RuleKey, lc: LayerC, cx: CContext) -> str:
    assert cx.rules is not None, "a rule opcode in a program without rules"
    return cx.rules.on_key(lc.name)


@C.register(I.ApplyRules)
def apply_rules(ins: I.ApplyRules, lc: LayerC | None, cx: CContext) -> str:
    # of no layer: rendered at the function's exit (cgen.process_body), lc is None
    assert cx.rules is not None, "a rule opcode in a program without rules"
    return cx.rules.hook()
