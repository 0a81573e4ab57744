"""A layer's header program in BPF C: fixed chunks copied out of the frame with
bpf_xdp_load_bytes (the helper checks the bounds, so the verifier sees constant-size stack
copies only), fields extracted with constant shifts; `any_until` as a loop bounded by its
`max`. Same steps, same failures (truncated, malformed) as LayerC.header_code."""

from __future__ import annotations

from rubikgen.ir.cond import Src
from rubikgen.ir.layout import AnyUntil, Elif, Else, HField, If, Parse, Step

from ..layer_c import LayerC, ctype_of_width
from .xcontext import Unlowerable, cond_bpf, to_bpf

BUF = 64  # bytes of the stack buffer a fixed chunk is copied into


def _extract(f: HField, bit: int) -> str:
    """The value of a number field at `bit` of rgx_buf (big-endian bit order, or a
    byte-aligned little-endian field)."""
    w = f.width or 64
    first, last = bit // 8, (bit + w - 1) // 8
    idx = list(range(first, last + 1))
    if f.order == "little":
        if bit % 8 or w % 8:
            raise Unlowerable(f"little-endian bit field {f.name}", None)
        idx = idx[::-1]
    terms = []
    nb = len(idx)
    for k, i in enumerate(idx):
        sh = 8 * (nb - 1 - k)
        terms.append(f"((__u64)rgx_buf[{i}] << {sh})" if sh else f"(__u64)rgx_buf[{i}]")
    v = " | ".join(terms)
    if f.order == "little":
        return f"({v})"
    tail = (last + 1) * 8 - (bit + w)
    if tail:
        v = f"(({v}) >> {tail})"
    if w < 64:
        v = f"(({v}) & {(1 << w) - 1:#x}ULL)"
    return f"({v})"


class Header:
    def __init__(self, lc: LayerC) -> None:
        self.lc = lc
        self.n = lc.name
        self.k = 0

    def src(self, line: int) -> Src:
        return Src(self.lc.spec_file, line)

    def fail(self, reason: int) -> str:
        return f"{{ err_{self.n} = {reason}; goto HE_{self.n}; }}"

    def code(self) -> list[str]:
        return self.steps(self.lc.d.header, 1)

    def steps(self, steps: list[Step], ind: int) -> list[str]:
        out: list[str] = []
        pad = "    " * ind
        src = self.src(self.lc.d.header_line)
        for s in steps:
            if isinstance(s, Parse):
                out += self.layout(s.layout, ind)
            elif isinstance(s, If):
                out.append(f"{pad}if ({cond_bpf(s.cond, self.lc, src)}) {{")
                out += self.steps(s.then, ind + 1)
                out.append(f"{pad}}}")
            elif isinstance(s, Elif):
                out[-1] = f"{pad}}} else if ({cond_bpf(s.cond, self.lc, src)}) {{"
                out += self.steps(s.then, ind + 1)
                out.append(f"{pad}}}")
            elif isinstance(s, Else):
                out[-1] = f"{pad}}} else {{"
                out += self.steps(s.then, ind + 1)
                out.append(f"{pad}}}")
            elif isinstance(s, AnyUntil):
                out += self.any_until(s, ind)
        return out

    def layout(self, lname: str, ind: int) -> list[str]:
        pad = "    " * ind
        n = self.n
        fields = self.lc.d.layouts[lname]
        line = self.lc.d.layout_lines[lname]
        out = [f"{pad}/* layout {lname} ({self.lc.spec_file}:{line}) */"]
        chunk: list[tuple[HField, int]] = []
        bits = 0

        def flush() -> None:
            nonlocal chunk, bits
            if not chunk:
                return
            nb = (bits + 7) // 8
            if nb > BUF:
                raise Unlowerable(
                    f"layout {lname}: a fixed part of {nb} bytes (at most {BUF})", self.src(line)
                )
            out.append(f"{pad}if (cur_{n} + {nb}ULL > in_{n}.len) {self.fail(1)}")
            out.append(
                f"{pad}if (bpf_xdp_load_bytes(ctx, in_{n}.ptr + cur_{n}, rgx_buf, {nb})) "
                f"{self.fail(1)}"
            )
            for f, b in chunk:
                if f.kind == "num":
                    ct = ctype_of_width(f.width or 64)
                    out.append(f"{pad}h_{n}.{f.name} = ({ct}){_extract(f, b)};")
                else:
                    out.append(
                        f"{pad}h_{n}.{f.name} = rg_bytes_make(in_{n}.ptr + cur_{n} + {b // 8}, "
                        f"{f.size});"
                    )
            out.append(f"{pad}cur_{n} += {nb};")
            for f, _ in chunk:
                if f.kind == "num" and f.const is not None:
                    out.append(f"{pad}if (h_{n}.{f.name} != {f.const}u) {self.fail(2)}")
            chunk, bits = [], 0

        for f in fields:
            if f.kind == "num" or f.size is not None:
                if f.kind != "num" and bits % 8:
                    raise Unlowerable(f"byte field {f.name} off a byte boundary", self.src(f.line))
                chunk.append((f, bits))
                bits += (f.width or 64) if f.kind == "num" else (f.size or 0) * 8
                continue
            flush()
            assert f.length is not None
            ln = to_bpf(f.length, self.lc, self.src(f.line)).text
            if f.length_unit == "bits":
                ln = f"({ln} >> 3)"
            out.append(f"{pad}{{")
            out.append(f"{pad}    __u64 n_ = {ln};")
            out.append(f"{pad}    if (n_ > (__u64)(in_{n}.len - cur_{n})) {self.fail(1)}")
            out.append(f"{pad}    h_{n}.{f.name} = rg_bytes_make(in_{n}.ptr + cur_{n}, n_);")
            out.append(f"{pad}    cur_{n} += (__u32)n_;")
            out.append(f"{pad}}}")
        flush()
        out.append(f"{pad}h_{n}.has__{lname} = 1;")
        return out

    def any_until(self, au: AnyUntil, ind: int) -> list[str]:
        pad = "    " * ind
        n = self.n
        self.k += 1
        k = self.k
        firsts = [self.lc.d.layouts[x][0] for x in au.layouts]
        tw = firsts[0].width or 8
        if firsts[0].kind != "num" or tw not in (8, 16):
            raise Unlowerable(
                "any_until whose tag is not a byte or a 16-bit word", self.src(au.line)
            )
        order = "little" if firsts[0].order == "little" else "big"
        out = [f"{pad}{{ /* any_until ({self.lc.spec_file}:{au.line}), at most {au.max} */"]
        out.append(f"{pad}    __u32 it{k}_;")
        out.append(f"{pad}    for (it{k}_ = 0; it{k}_ < {au.max}u; it{k}_++) {{")
        out.append(f"{pad}        __u64 tag_ = 0; int stop_ = 0;")
        out.append(f"{pad}        if (cur_{n} + {tw // 8}ULL > in_{n}.len) break;")
        out.append(
            f"{pad}        if (bpf_xdp_load_bytes(ctx, in_{n}.ptr + cur_{n}, rgx_buf, {tw // 8})) "
            "break;"
        )
        if tw == 8:
            out.append(f"{pad}        tag_ = rgx_buf[0];")
        elif order == "big":
            out.append(f"{pad}        tag_ = ((__u64)rgx_buf[0] << 8) | rgx_buf[1];")
        else:
            out.append(f"{pad}        tag_ = ((__u64)rgx_buf[1] << 8) | rgx_buf[0];")
        default = None
        first = True
        for lname, f in zip(au.layouts, firsts, strict=True):
            if f.const is None:
                default = lname
                continue
            kw = "if" if first else "} else if"
            first = False
            out.append(f"{pad}        {kw} (tag_ == {f.const}u) {{")
            out += self.layout(lname, ind + 3)
        body = (
            self.layout(default, ind + 3)
            if default is not None
            else [f"{pad}            stop_ = 1;"]
        )
        if first:
            out.append(f"{pad}        {{")
        else:
            out.append(f"{pad}        }} else {{")
        out += body
        out.append(f"{pad}        }}")
        out.append(f"{pad}        (void)tag_;")
        out.append(f"{pad}        if (stop_) break;")
        if au.until is not None:
            out.append(f"{pad}        if ({cond_bpf(au.until, self.lc, self.src(au.line))}) break;")
        out.append(f"{pad}    }}")
        out.append(f"{pad}}}")
        return out
