"""A flow key as the words its hash and compare read, assembled in registers.

The byte key (kf_ / kr_) is written with one narrow store per field; hashing it 8 bytes at
a time right after stalls every lookup (the store buffer cannot forward several narrow
stores into one wide load).  The lookup right after the key is built takes it as words
instead (rg_flow_lookup_wt and friends, runtime-c/include/rg/rg_flow.h): each word the or
of its fields' bytes shifted into place, the same bytes as the byte key, so the same hash,
record and direction.  Each field is loaded once, as 8-byte chunks (rg_kw_be: a number,
rg_kw_bytes: bytes), shared by the forward and reverse keys.  The byte keys stay for
creates, instance records, observers and rules.
"""

from __future__ import annotations

from typing import Any

from .cexpr import to_c


def windows(key_len: int) -> list[tuple[int, int]]:
    """(offset, length) of each word of a key_len-byte key: RG_KW_WORDS / rg_kw_off."""
    if key_len < 8:
        return [(0, key_len)]
    nw = (key_len + 7) // 8
    return [(8 * i if 8 * i + 8 <= key_len else key_len - 8, 8) for i in range(nw)]


class KeyWords:
    """The C of one layer's key words: chunk loads, then words from the chunks."""

    def __init__(self, layer: str, env: Any) -> None:
        self.layer, self.env = layer, env
        self.chunks: dict[tuple[str, str, int, int], str] = {}  # (kind, C, size, chunk)
        self.loads: list[str] = []

    def _chunk(self, part: Any, text: str, c: int) -> str:
        key = (part.kind, text, part.size, c)
        if key not in self.chunks:
            name = f"kc{len(self.chunks)}_{self.layer}"
            self.chunks[key] = name
            if part.kind == "num":  # numbers are at most 8 bytes: one chunk
                val = f"rg_kw_be({text}, {part.size})"
            else:
                k = min(8, part.size - 8 * c)
                val = f"rg_kw_bytes({text}, {part.size}, {8 * c}, {k})"
            self.loads.append(f"const uint64_t {name} = {val};")
        return self.chunks[key]

    def words(self, parts: list[Any], key_len: int) -> list[str]:
        """One C expression (uint64_t) per word of the key whose fields are `parts`
        (layer_c.KeyPart: offset, size, number or bytes)."""
        texts = [to_c(p.expr, self.env).text for p in parts]
        out = []
        for wo, wl in windows(key_len):
            terms = []
            for p, text in zip(parts, texts, strict=True):
                s, e = max(p.off, wo), min(p.off + p.size, wo + wl)
                while s < e:  # the slice [s, e) of the key, cut at the field's chunks
                    rel = s - p.off
                    c, frm = divmod(rel, 8)
                    k = min(e - s, 8 - frm)
                    terms.append(f"rg_kw_put({self._chunk(p, text, c)}, {frm}, {k}, {s - wo})")
                    s += k
            out.append(" | ".join(terms) if terms else "0")
        return out


def build_words(layer: str, env: Any, keys: list[tuple[str, list[Any]]], key_len: int) -> list[str]:
    """A block filling each uint64_t array of `keys` (name, fields) with its words."""
    kw = KeyWords(layer, env)
    sets = [
        f"    {buf}[{i}] = {w};"
        for buf, parts in keys
        for i, w in enumerate(kw.words(parts, key_len))
    ]
    return ["{ /* the key as words (keywords.py) */", *(f"    {x}" for x in kw.loads), *sets, "}"]
