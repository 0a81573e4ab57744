"""The back-end's renderer registries (issue 28 item 3): every IR node kind has a renderer in
the C target and in the burst stage, registries refuse a second registration and fall back to
their base, and the back-end renders without sema's name resolver (the one call it made,
binding a perm's name for its init, now reads the target the IR carries).

That the split renders the same C as the class it replaced is ci/gen_snapshot.py's job (run
before and after, `diff -r`); the differential and tshark suites check what that C does."""

from __future__ import annotations

from dataclasses import fields

import pytest
from support import REPO_ROOT

from rubikgen.backend.burst_c import STAGE1
from rubikgen.backend.c import C
from rubikgen.backend.cgen import generate_c
from rubikgen.backend.registry import Registry, UnknownNode
from rubikgen.ir import instrs as I
from rubikgen.ir.nodes import OPCODES, Branch, Call, Done, Jump, Return
from rubikgen.pipeline import Compilation

REPO = REPO_ROOT
TERMINATORS = (Jump, Branch, Call, Return, Done)


@pytest.mark.parametrize("reg", [C, STAGE1], ids=lambda r: r.target)
def test_every_node_kind_has_a_renderer(reg: Registry[object]) -> None:
    assert reg.missing([*OPCODES.values(), *TERMINATORS]) == []


def test_a_second_registration_is_refused_and_a_derived_registry_overrides() -> None:
    with pytest.raises(ValueError, match="Fire registered twice"):
        C.register(I.Fire)(lambda ins, lc, cx: "")
    derived: Registry[object] = Registry("t", base=C)  # type: ignore[arg-type]
    derived.register(I.Fire)(lambda ins, lc, cx: "mine")
    assert derived.render(I.Fire(layer="x", event="e"), None, None) == "mine"
    assert derived.lookup(I.SetSdu) is C.lookup(I.SetSdu)  # the base's renderer
    with pytest.raises(UnknownNode, match="renders no int"):
        Registry("empty").lookup(int)


def test_the_back_end_renders_without_the_name_resolver() -> None:
    # tcp_ip's perms with inits (TCP's) bind their names at create: the back-end used to ask
    # sema's resolver for them while rendering
    comp = Compilation(REPO / "specs" / "stacks" / "tcp_ip.yaml", opt_level=2)
    prog = comp.program
    assert any(v.init is not None for lir in prog.layers.values() for v in lir.desc.perms.values())
    # the IR holds no semantic model (nor a table to ask): the trees it renders are its own
    assert not [
        f.name for f in fields(prog) if "Model" in str(f.type) or "Resolution" in str(f.type)
    ]
    files = generate_c(prog, "h", 2).files
    assert "init, " in files["tcp_ip_gen.c"]  # the perm inits are rendered


def test_opcode_classes_declare_the_effects_lowering_gives_them() -> None:
    comp = Compilation(REPO / "specs" / "stacks" / "tcp_ip.yaml", opt_level=0)
    prog = comp.lowered
    ins = [i for b in prog.blocks.values() for i in b.instrs]
    lookup = next(i for i in ins if isinstance(i, I.Lookup) and i.layer == "tcp")
    assert lookup.reads == {"KEY:tcp", "RUNTIME"} and lookup.writes == {"INST:tcp"}
    # a parameter's layer: tcp's header program reads its ip layer's header
    parse = next(i for i in ins if isinstance(i, I.ParseHeader) and i.layer == "tcp")
    assert {"HEADER:tcp", "HEADER:ip"} <= parse.reads
    assert all(i.undeclared() == [] for i in ins)
    # an instruction built without them is reported by the verifier
    from rubikgen.ir import verify

    blk = next(b for b in prog.blocks.values() if b.instrs)
    blk.instrs.append(I.Destroy(layer=blk.layer))
    assert any("lacks its declared effect: reads INST:" in p for p in verify(prog))
