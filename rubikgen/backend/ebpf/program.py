"""The XDP program of a stack: which layers it parses, the per-CPU scratch record that holds
their state, the blocks rendered by the registry (instrs.py), the flow key and the rules.

Layers: from the Ethernet entry, a layer is *full* (rendered block by block, its edges
followed) when a layer the program needs (one the rules name, one whose selector keys the
flow maps) lies below it, *leaf* (its header parsed, nothing below) when it is needed itself.
A layer the rules name that cannot be reached through lowerable layers is an RG080 error at
the line that stops it; flow layers that cannot are left out (their packets' flows are then
not looked up in the maps)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rubikgen.expr.ast import Name, walk
from rubikgen.ir import instrs as I
from rubikgen.ir.cond import Src
from rubikgen.ir.nodes import Branch, Call, Program
from rubikgen.ir.rules import RuleSet

from ..context import label
from ..layer_c import LayerC, ctype_of_width
from . import instrs as X
from . import rules as R
from .prelude import PRELUDE
from .registry import EBPF
from .xcontext import Unlowerable, XContext, to_bpf

FLOWS = 65536  # entries of each flow map (LRU: the least recently used goes)
_STATE = ("STATE:", "FIRED:", "SEQ:", "INST:", "PERM:")
_VARS_U32 = ("cur", "err", "psm", "loop", "rep", "ret", "resume", "has_inst", "dir", "found")
_VARS_BYTES = ("in", "sdu", "lin", "seqd")


@dataclass
class XdpProgram:
    c: str
    meta: dict[str, Any] = field(default_factory=dict)


def _layers(prog: Program) -> dict[str, LayerC]:
    assert prog.desc is not None
    layers: dict[str, LayerC] = {}
    for name, lir in prog.layers.items():
        assert lir.desc is not None
        layers[name] = LayerC(lir.desc, lir.index, layers)
    for name, lc in layers.items():
        lc.atoms = len(prog.layers[name].atoms)
        hs = [h for h, hd in prog.desc.handlers.items() if hd.layer == name]
        hs += [u for u, ul in prog.desc.udes.items() if ul == name]
        lc.prepare(hs)
    return layers


def _children(prog: Program) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {n: [] for n in prog.layers}
    for b in prog.blocks.values():
        t = b.term
        if isinstance(t, Call) and t.child != t.layer and t.child not in out[t.layer]:
            out[t.layer].append(t.child)
    return out


def _try(fn: Any) -> Unlowerable | None:
    try:
        fn()
    except Unlowerable as e:
        return e
    return None


class _Plan:
    def __init__(self, prog: Program, rules: RuleSet | None) -> None:
        self.prog = prog
        self.rules = rules
        self.lcs = _layers(prog)
        ent = prog.entries.get("ethernet")
        if ent is None:
            raise Unlowerable("the stack has no Ethernet entry (XDP sees Ethernet frames)", None)
        self.entry = ent
        self.kids = _children(prog)
        self.rule_layers: set[str] = set()
        self.rule_fields = R.rule_fields(rules) if rules is not None else {}
        if rules is not None:
            R.check(rules)
            for r in rules.rules:
                self.rule_layers |= set(R.rule_layers(r))
        self.left_out: dict[str, str] = {}
        self.blocks: dict[str, list[Any]] = {}
        for b in prog.blocks.values():
            self.blocks.setdefault(b.layer, []).append(b)

    def cx(self, full: set[str], leaf: set[str], flows: set[str]) -> XContext:
        cx = XContext(self.prog, self.lcs, full, leaf, flows, self.rule_layers)
        cx.kids = {n: set(cs) for n, cs in self.kids.items()}
        for b in self.prog.blocks.values():
            for ins in b.instrs:
                if isinstance(ins, I.LoopDecide):
                    cx.max_repeat[b.layer] = ins.max_repeat
            t = b.term
            if isinstance(t, Branch) and any(r.startswith(_STATE) for r in t.reads):
                if t.cond.kind in ("expr", "create_if"):
                    cx.stateful.add(b.layer)
        return cx

    def full_text(self, n: str, cx: XContext) -> list[str]:
        lc = self.lcs[n]
        out = [f"/* layer {n} ({lc.spec_file}:{lc.d.header_line}): every block */"]
        for b in self.blocks.get(n, []):
            out.append(f"{label(b.name)}: ;" + (f" /* {b.src} */" if b.src else ""))
            for ins in b.instrs:
                if isinstance(ins, X.UNLOWERABLE):
                    raise Unlowerable(f"{ins.op} in layer {n}", ins.src or b.src)
                out.append(EBPF.render(ins, lc, cx))
            assert b.term is not None
            out += EBPF.render(b.term, b, cx)
        return out

    def leaf_text(self, n: str, cx: XContext) -> list[str]:
        lc = self.lcs[n]
        entry = self.prog.blocks[self.prog.layers[n].entry]
        out = [f"/* layer {n} ({lc.spec_file}:{lc.d.header_line}): its header only */"]
        out.append(f"{label(entry.name)}: ;")
        for ins in entry.instrs:
            if isinstance(ins, I.Enter | I.ParseHeader | I.RuleRead):
                out.append(EBPF.render(ins, lc, cx))
        out += X.return_to_caller(cx, n)
        return out

    def key_text(self, n: str) -> list[str]:
        lc = self.lcs[n]
        src = Src(lc.spec_file, lc.d.header_line, "selector")
        if lc.key_len > 40:
            raise Unlowerable(f"layer {n}: a {lc.key_len}-byte key (at most 40)", src)
        out = [
            f"#define RGX_KEY_{n}() do {{ /* {n}: the selector key, both directions one entry */",
            "    __builtin_memset(&rgx_s->kf, 0, sizeof rgx_s->kf);",
            "    __builtin_memset(&rgx_s->kr, 0, sizeof rgx_s->kr);",
        ]
        for buf, parts in (("kf", lc.key_fwd), ("kr", lc.key_rev)):
            for p in parts:
                for nm in walk(p.expr):
                    if isinstance(nm, Name) and nm.ref is not None and "temp" in nm.ref.kind:
                        raise Unlowerable(f"layer {n}: the key reads a temp ({p.name})", src)
                ce = to_bpf(p.expr, lc, src)
                if p.kind == "num":
                    out.append(f"    rgx_put_be(rgx_s->{buf}.k + {p.off}, {ce.text}, {p.size});")
                else:
                    out.append(
                        f"    bpf_xdp_load_bytes(ctx, ({ce.text}).ptr, rgx_s->{buf}.k + {p.off}, "
                        f"{p.size});"
                    )
        out.append("    rgx_s->kd = 0;")
        if lc.key_rev:
            out += [
                "    for (int i_ = 0; i_ < RGX_KEY_MAX; i_++) {",
                "        if (rgx_s->kd == 0 && rgx_s->kf.k[i_] != rgx_s->kr.k[i_])",
                "            rgx_s->kd = rgx_s->kf.k[i_] < rgx_s->kr.k[i_] ? 1 : 2;",
                "    }",
                "    if (rgx_s->kd == 2) __builtin_memcpy(rgx_s->key.k, rgx_s->kr.k, RGX_KEY_MAX);",
                "    else __builtin_memcpy(rgx_s->key.k, rgx_s->kf.k, RGX_KEY_MAX);",
            ]
        else:
            out.append("    __builtin_memcpy(rgx_s->key.k, rgx_s->kf.k, RGX_KEY_MAX);")
        out += [
            f"    rgx_s->key.layer = {lc.index}; rgx_s->key.len = {lc.key_len};",
            f"    rgx_s->kdir = rgx_s->kd == 2; rgx_s->klen = in_{n}.len;",
            "    rgx_s->has_key = 1; rgx_s->deep = 0;",
            "} while (0)",
        ]
        return [x + " \\" if i < len(out) - 1 else x for i, x in enumerate(out)]

    def plan(self) -> tuple[set[str], set[str], set[str], XContext]:
        lcs = self.lcs
        flows = {
            n for n, lc in lcs.items()
            if lc.has_instance and lc.bidir and _try(lambda n=n: self.key_text(n)) is None
        }  # fmt: skip
        targets = self.rule_layers | flows
        probe = self.cx(set(lcs), set(), set())
        full_ok = {n: _try(lambda n=n: self.full_text(n, probe)) for n in lcs}
        leaf_ok = {n: _try(lambda n=n: self.leaf_text(n, probe)) for n in lcs}
        seen, todo = {self.entry}, [self.entry]
        while todo:
            n = todo.pop()
            if full_ok[n] is None:
                for c in self.kids[n]:
                    if c not in seen:
                        seen.add(c)
                        todo.append(c)
        sat = {t for t in targets if t in seen and leaf_ok[t] is None}
        for t in sorted(self.rule_layers - sat):
            raise self._why(t, full_ok, leaf_ok)

        def below(n: str, path: frozenset[str]) -> bool:
            return any(
                c in sat or (c not in path and full_ok[c] is None and below(c, path | {c}))
                for c in self.kids[n] if c in seen
            )  # fmt: skip

        full = {
            n for n in seen
            if full_ok[n] is None and (below(n, frozenset({n})) or (n in sat and n in self.kids[n]))
        }  # fmt: skip
        leaf = sat - full
        flows &= full | leaf
        # why a layer is out of the program (STACK_xdp.json): the reason its parent or it fails
        for n in seen - full - leaf:
            why = full_ok[n] or leaf_ok[n]
            if why is not None:
                self.left_out[n] = str(why) + (f" ({why.src})" if why.src else "")
        return full, leaf, flows, self.cx(full, leaf, flows)

    def _why(self, t: str, full_ok: dict[str, Any], leaf_ok: dict[str, Any]) -> Unlowerable:
        """Why a layer the rules name is out of reach: the first unlowerable layer above it."""
        rule = next(r for r in (self.rules.rules if self.rules else []) if t in R.rule_layers(r))
        rs = self.rules
        assert rs is not None
        where = Src(rs.file, rule.line, f"rule {rule.name}")
        parents = {n: [p for p, cs in self.kids.items() if n in cs] for n in self.lcs}
        seen, todo = {t}, [t]
        while todo:
            n = todo.pop()
            for p in parents[n]:
                if full_ok[p] is not None:
                    e: Unlowerable = full_ok[p]
                    return Unlowerable(
                        f"rule {rule.name} reads layer {t}, below layer {p}, which XDP cannot "
                        f"follow: {e.what}" + (f" ({e.src})" if e.src else ""), where,
                        "keep this rule for user space (a rules file without it for --xdp)",
                    )  # fmt: skip
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        e2 = leaf_ok[t]
        if e2 is not None:
            return Unlowerable(f"rule {rule.name} reads layer {t}: {e2.what}", where)
        return Unlowerable(f"rule {rule.name} reads layer {t}, not reached from Ethernet", where)


def _scratch(cx: XContext, rules: RuleSet | None) -> list[str]:
    out = []
    for n in sorted(cx.rendered, key=lambda x: cx.layers[x].index):
        lc = cx.layers[n]
        d = lc.d
        out.append(f"struct L_{n}_hdr {{")
        for f in d.fields.values():
            if f.kind == "num":
                out.append(f"    {ctype_of_width(f.width or 64)} {f.name};")
            else:
                out.append(f"    rg_bytes {f.name};")
        out += [f"    __u8 has__{lay};" for lay in d.layouts]
        out.append("    __u8 pad_;\n};")
        out.append(f"struct L_{n}_tmp {{")
        for v in d.temps.values():
            out.append(f"    {'__u64' if v.kind == 'num' else 'rg_bytes'} {v.name};")
        out.append("    __u8 pad_;\n};")
        out.append(f"struct L_{n}_inst {{\n    struct {{ __u32 state; }} fi;")
        for v in d.perms.values():
            out.append(f"    {'__u64' if v.kind == 'num' else 'rg_bytes'} {v.name};")
        out.append("};")
    out.append("struct rgx_state {")
    for n in sorted(cx.rendered, key=lambda x: cx.layers[x].index):
        lc = cx.layers[n]
        out.append(f"    /* layer {n} */")
        out.append(
            f"    struct L_{n}_hdr h_{n}; struct L_{n}_tmp t_{n}; struct L_{n}_inst inst_{n};"
        )
        out.append(f"    __u8 ev_{n}[{max(1, len(lc.events))}]; __u8 va_{n}[{max(1, lc.atoms)}];")
        out.append("    __u32 " + ", ".join(f"{v}_{n}" for v in _VARS_U32) + ";")
        out.append("    rg_bytes " + ", ".join(f"{v}_{n}" for v in _VARS_BYTES) + ";")
        out.append(f"    __u64 seqm_{n};")
        if n in cx.rule_layers:
            out.append(f"    __u8 rs_{n};")
    if rules is not None:
        for refs in R.rule_fields(rules).values():
            for fr in refs:
                out.append(f"    __u64 rf_{fr.layer}_{fr.field}{'[2]' if fr.width > 64 else ''};")
    out += [
        "    struct rgx_key key, kf, kr;",
        "    __u32 has_key, deep, defer, kd, kdir, klen;",
        "};",
        "struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __uint(max_entries, 1);",
        '         __type(key, __u32); __type(value, struct rgx_state); } rg_scratch SEC(".maps");',
    ]
    for n in sorted(cx.rendered):
        for nm in ("h", "t", "ev", "va", *_VARS_U32, *_VARS_BYTES, "seqm"):
            out.append(f"#define {nm}_{n} (rgx_s->{nm}_{n})")
        out.append(f"#define inst_{n} (&rgx_s->inst_{n})")
    return out


def _rules_hooks(cx: XContext, rules: RuleSet | None) -> list[str]:
    out = []
    for n in sorted(cx.rule_layers):
        lines = [f"#define RGX_RULES_{n}() do {{ rgx_s->rs_{n} = 1;"]
        for f in (R.rule_fields(rules) if rules is not None else {}).get(n, []):
            hf = cx.layers[n].d.fields[f.field]
            if hf.kind == "num":
                lines.append(f"    rgx_s->rf_{n}_{f.field} = h_{n}.{f.field};")
            elif f.width > 64:
                lines.append(
                    f"    rgx_s->rf_{n}_{f.field}[0] = rgx_be(ctx, h_{n}.{f.field}.ptr, 8);"
                )
                lines.append(
                    f"    rgx_s->rf_{n}_{f.field}[1] = rgx_be(ctx, h_{n}.{f.field}.ptr + 8, 8);"
                )
            else:
                lines.append(
                    f"    rgx_s->rf_{n}_{f.field} = rgx_be(ctx, h_{n}.{f.field}.ptr, {f.width // 8});"
                )
        lines.append("} while (0)")
        out += [x + " \\" if i < len(lines) - 1 else x for i, x in enumerate(lines)]
    return out


PROLOGUE = [
    "    __u32 zero = 0;",
    "    __u8 rgx_buf[64];",
    "    struct rgx_state *rgx_s = bpf_map_lookup_elem(&rg_scratch, &zero);",
    "    __u64 plen = bpf_xdp_get_buff_len(ctx);",
    "    if (!rgx_s) return RGX_UP;",
    "    (void)rgx_buf; (void)plen;",
]


def _layer_program(p: _Plan, cx: XContext, n: str) -> list[str]:
    """One layer's program: its blocks, entered at the block its resume number says."""
    text = p.full_text(n, cx) if n in cx.full else p.leaf_text(n, cx)
    entry = label(p.prog.layers[n].entry)
    disp = [f"    switch (resume_{n}) {{"]
    for i, b in enumerate(cx.resumes.get(n, [])):
        disp.append(f"    case {i + 1}: goto {label(b)};")
    disp += [f"    default: goto {entry};", "    }"]
    return [
        'SEC("xdp")',
        f"int rgx_{n}(struct xdp_md *ctx)",
        "{",
        *PROLOGUE,
        *disp,
        *["    " + x for x in text],
        "}",
        "",
    ]


def generate_xdp(prog: Program) -> XdpProgram:
    """The XDP program's C, with the program's rules (Program.rules, ir/lower_rules.py;
    Unlowerable when the rules need what XDP cannot do)."""
    rules = prog.rules.rules if prog.rules is not None else None
    p = _Plan(prog, rules)
    full, leaf, flows, cx = p.plan()
    nrules = len(rules.rules) if rules is not None else 0
    order = sorted(cx.rendered, key=lambda x: cx.layers[x].index)
    cx.prog_id = {n: i for i, n in enumerate(order)}
    done = len(order)
    progs: list[str] = []
    for n in order:  # every layer rendered once first: its returns name the blocks resumed at
        _ = p.full_text(n, cx) if n in cx.full else p.leaf_text(n, cx)
    for n in order:
        progs += _layer_program(p, cx, n)
    keys = [x for n in sorted(flows) for x in p.key_text(n)]
    ent = p.entry
    head = [
        f"/* generated by rubikgen from {prog.desc.file if prog.desc else prog.stack}: the XDP",
        " * program of its stateless path (docs/xdp.md). Build: clang -O2 -g -target bpf -c.",
        " * rg_xdp is the one to attach; each layer is a program of its own, reached by tail",
        " * calls through rg_progs (filled by libbpf from the initialiser at the end). */",
        f"#define RGX_FLOWS {FLOWS}",
        f"#define RGX_RULES {max(1, nrules)}",
        f"#define RGX_PROGS {done + 1}",
        PRELUDE,
        *_scratch(cx, rules),
        *[f"int rgx_{n}(struct xdp_md *ctx);" for n in order],
        "int rgx_done(struct xdp_md *ctx);",
        "/* the slots of rg_progs: each layer's program, then rgx_done */",
        "struct { __uint(type, BPF_MAP_TYPE_PROG_ARRAY); __uint(max_entries, RGX_PROGS);",
        "         __uint(key_size, sizeof(__u32)); __array(values, int(struct xdp_md *)); }",
        '    rg_progs SEC(".maps") = { .values = {',
        *[f"    [{cx.prog_id[n]}] = (void *)&rgx_{n}," for n in order],
        f"    [{done}] = (void *)&rgx_done,",
        "} };",
        "/* the next program; if the kernel refuses the tail call (more than 33 in the packet),",
        " * the packet goes up to user space, counted as deferred */",
        "#define RGX_JUMP(i) do { bpf_tail_call(ctx, &rg_progs, (i)); "
        "rgx_stat(RGX_ST_DEFERRED); return RGX_UP; } while (0)",
        f"#define RGX_DONE() RGX_JUMP({done})",
        "#define RGX_FADD(c) do { rgx_add((struct rgx_count *)(c), plen); __u32 d_ = rgx_s->kdir & 1;"
        " __sync_fetch_and_add(&(c)->dir_packets[d_], 1);"
        " __sync_fetch_and_add(&(c)->dir_bytes[d_], rgx_s->klen); } while (0)",
        "#define RGX_DEFER() do { rgx_s->defer = 1; RGX_DONE(); } while (0)",
        *_rules_hooks(cx, rules),
        *keys,
        "",
        'SEC("xdp")',
        "int rg_xdp(struct xdp_md *ctx)",
        "{",
        *PROLOGUE,
        "    rgx_stat(RGX_ST_PACKETS);",
        "    rgx_s->has_key = 0; rgx_s->deep = 0; rgx_s->defer = 0;",
        *[f"    rgx_s->rs_{n} = 0;" for n in sorted(cx.rule_layers)],
        *(
            [
                f"    in_{ent} = rg_bytes_make(0, plen); ret_{ent} = 0; rep_{ent} = 0;",
                f"    resume_{ent} = 0;",
                f"    RGX_JUMP({cx.prog_id[ent]});",
            ]
            if ent in cx.prog_id
            else ["    RGX_DONE(); /* no layer to parse: nothing the maps or rules need */"]
        ),
        "}",
        "",
    ]
    tail = [
        'SEC("xdp")',
        "int rgx_done(struct xdp_md *ctx)",
        "{",
        *PROLOGUE,
        "    if (rgx_s->defer) { rgx_stat(RGX_ST_DEFERRED); return RGX_UP; }",
        "    if (rgx_s->has_key && !rgx_s->deep) {",
        "        struct rgx_fcount *c = bpf_map_lookup_elem(&rg_drop, &rgx_s->key);",
        "        if (c) { RGX_FADD(c); rgx_stat(RGX_ST_FLOW_DROP); return XDP_DROP; }",
        "        c = bpf_map_lookup_elem(&rg_bypass, &rgx_s->key);",
        "        if (c) { RGX_FADD(c); rgx_stat(RGX_ST_BYPASS); return rgx_bypass_verdict(); }",
        "    }",
    ]
    for ins in prog.exit:  # the rules (ApplyRules), after every layer
        tail += ["    " + x for x in EBPF.render(ins, None, cx)]
    tail += [
        "    rgx_stat(RGX_ST_NO_RULE);",
        "    return RGX_UP; /* to user space: the AF_XDP socket or the kernel's stack */",
        "}",
        "",
        'char LICENSE[] SEC("license") = "Dual BSD/GPL";',
    ]
    text = "\n".join(head + progs + tail) + "\n"
    meta = {
        "stack": prog.stack,
        "entry": ent,
        "layers_full": sorted(full),
        "layers_header": sorted(leaf),
        "flow_layers": {
            n: {
                "index": cx.layers[n].index,
                "key_len": cx.layers[n].key_len,
                "key": [
                    {"name": k.name, "off": k.off, "size": k.size, "kind": k.kind}
                    for k in cx.layers[n].key_fwd
                ],
                "bidirectional": bool(cx.layers[n].key_rev),
            }
            for n in sorted(flows)
        },
        "rules": [
            {"name": r.name, "action": r.action, "line": r.line}
            for r in (rules.rules if rules else [])
        ],
        "stats": ["packets", "rule_drop", "rule_pass", "flow_drop", "bypass", "deferred",
                  "no_rule"],
        "maps": {"rules": "rg_rules", "drop": "rg_drop", "bypass": "rg_bypass",
                 "stats": "rg_stats", "conf": "rg_conf",
                 "xsks": "rg_xsks"},
        "not_followed": p.left_out,
        "key_max": 40,
        "flows": FLOWS,
    }  # fmt: skip
    return XdpProgram(text, meta)
