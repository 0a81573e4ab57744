"""Flow keys passed to the lookups as words (keywords.py, rg_flow_lookup_wt): the words'
byte arithmetic against the key's byte layout, and where the generated C uses them.

That the words give the same hash, record and direction as the byte key is the runtime's
cmocka suite (test_flow.c); that the output stays the same, the differential suite's."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cache
from types import SimpleNamespace
from typing import Any

import pytest
from support import REPO_ROOT

from rubikgen.backend import keywords
from rubikgen.backend.keywords import KeyWords, windows
from rubikgen.pipeline import Compilation

REPO = REPO_ROOT


def test_windows_are_the_hash_reads() -> None:
    # rg_hash_bytes / rg_flow__keyeq: 8-byte words, the last one ending at the key's end
    assert windows(3) == [(0, 3)]
    assert windows(7) == [(0, 7)]
    assert windows(8) == [(0, 8)]
    assert windows(11) == [(0, 8), (3, 8)]
    assert windows(12) == [(0, 8), (4, 8)]
    assert windows(16) == [(0, 8), (8, 8)]
    assert windows(36) == [(0, 8), (8, 8), (16, 8), (24, 8), (28, 8)]


@dataclass
class Part:
    name: str
    expr: Any
    kind: str
    size: int
    side: int = 0
    off: int = 0


_CALL = re.compile(r"rg_kw_(be|bytes)\((\w+), (\d+)(?:, (\d+), (\d+))?\)")
_PUT = re.compile(r"rg_kw_put\((\w+), (\d+), (\d+), (\d+)\)")


def _eval_words(kw: KeyWords, exprs: list[str], values: dict[str, bytes]) -> list[bytes]:
    """The words' bytes, evaluating the generated C's rg_kw_* by their meaning (a chunk:
    bytes [from, from + k) of the field's stored bytes; a put: k bytes of a chunk from
    `from` moved to `pos`)."""
    chunks: dict[str, bytes] = {}
    for load in kw.loads:
        name, call = load.removeprefix("const uint64_t ").split(" = ", 1)
        m = _CALL.fullmatch(call.rstrip(";"))
        assert m, load
        field = values[m.group(2)]
        if m.group(1) == "be":
            chunks[name] = field
        else:
            frm, k = int(m.group(4)), int(m.group(5))
            chunks[name] = field[frm : frm + k]
    out = []
    for e in exprs:
        w = bytearray(8)
        for name, frm, k, pos in _PUT.findall(e):
            frm, k, pos = int(frm), int(k), int(pos)
            piece = chunks[name][frm : frm + k]
            assert len(piece) == k and pos + k <= 8
            assert w[pos : pos + k] == bytes(k), "two fields in one byte"
            w[pos : pos + k] = piece
        out.append(bytes(w))
    return out


@pytest.mark.parametrize("seed", range(300))
def test_words_hold_the_key_bytes(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    # the fields' C text: their names (to_c is the expression compiler, tested elsewhere)
    monkeypatch.setattr(keywords, "to_c", lambda e, env: SimpleNamespace(text=e))
    parts, values, off = [], {}, 0
    for i in range(rng.randint(1, 7)):
        kind = rng.choice(["num", "bytes"])
        size = rng.randint(1, 8) if kind == "num" else rng.randint(1, 20)
        parts.append(Part(f"f{i}", f"f{i}", kind, size, off=off))
        values[f"f{i}"] = bytes(rng.randrange(256) for _ in range(size))
        off += size
    key = b"".join(values[p.name] for p in parts)
    kw = KeyWords("x", None)
    words = _eval_words(kw, kw.words(parts, len(key)), values)
    want = [key[o : o + n].ljust(8, b"\0") for o, n in windows(len(key))]
    assert words == want
    # each field loaded once per chunk, whatever the number of words it spans
    assert len(kw.loads) == len(set(kw.loads))


@cache
def gen_c(stack: str) -> str:
    path = REPO / "specs" / "stacks" / f"{stack}.yaml"
    return Compilation(str(path), opt_level=2).generated.files[f"{stack}_gen.c"]


@pytest.mark.parametrize("stack", ["tcp_ip", "gtp"])
def test_lookups_take_the_key_as_words(stack: str) -> None:
    c = gen_c(stack)
    # every table lookup of the packet path but the memo ones (a tunnel's outer tables,
    # whose hit hashes nothing) reads words, built only for a table with instances, right
    # after the byte key's stores
    assert not re.search(r"rg_flow_lookup_nt\(ctx->tbl_", c)
    looks = re.findall(r"rg_flow_lookup_wt\(ctx->tbl_(\w+), kw_(\w+), ", c)
    assert looks and all(t == k for t, k in looks)
    for layer in {t for t, _ in looks}:
        assert re.search(
            rf"rg_flow_live\(ctx->tbl_{layer}\) != 0\) {{\n\s*{{ /\* the key as words", c
        )
    memo = set(re.findall(r"rg_flow_lookup_memo_n\(ctx->tbl_(\w+), kf_", c))
    assert memo == ({"ip1", "ip1v6", "udp", "udp6"} if stack == "gtp" else set())
    assert not memo & {t for t, _ in looks}
