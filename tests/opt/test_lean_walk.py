"""The lean TLV walk (lengths only) against the full walk it replaces, on random option blocks.

Both loops are taken from the generated C of tcp_ip (-O2 renders tcp's options lean, -O0
renders the full switch), compiled side by side into one harness under ASan/UBSan at -O0,
-O1 and -O2, and run on Hypothesis-generated blocks: any bytes, any captured length (the
buffer is allocated to exactly that length, so a read past it is an ASan error), any data
offset and start cursor. The two must agree on the error and on the cursor, always."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO_ROOT

from rubikgen.pipeline import Compilation

REPO = REPO_ROOT
TCP_IP = str(REPO / "specs" / "stacks" / "tcp_ip.yaml")
LEVELS = ("-O0", "-O1", "-O2")


def _block(c: str, head: str) -> str:
    """The brace-balanced statement of c starting at the first `head`."""
    i = c.index(head)
    depth = 0
    for j in range(i, len(c)):
        depth += {"{": 1, "}": -1}.get(c[j], 0)
        if depth == 0 and c[j] == "}":
            return c[i : j + 1]
    raise AssertionError(f"unbalanced {head!r}")


@cache
def _walks() -> tuple[str, str, str]:
    """(struct of tcp's header fields, full walk, lean walk) from the generated C."""
    files = {lv: Compilation(TCP_IP, opt_level=lv).generated.files["tcp_ip_gen.c"] for lv in (0, 2)}
    # the spec position the walks point back to (one loop in tcp.yaml)
    (at,) = set(re.findall(r"any_until \(\.\./protocols/tcp\.yaml:\d+\)", files[0]))
    full = _block(files[0], f"{{ /* {at} */")
    lean = _block(files[2], f"{{ /* {at}: lengths only")
    d = Compilation(TCP_IP).program.layers["tcp"].desc
    members = []
    for name, fields in d.layouts.items():
        members.append(f"uint8_t has__{name};")
        for f in fields:
            members.append(f"{'uint64_t' if f.kind == 'num' else 'rg_bytes'} {f.name};")
    return "\n".join(sorted(set(members))), full, lean


def _source(lean_text: str | None = None) -> str:
    struct, full, lean = _walks()
    lean = lean_text or lean
    fn = []
    for name, walk in (("full", full), ("lean", lean)):
        fn.append(f"""
static unsigned {name}(const uint8_t *p, size_t len, unsigned hl, uint32_t cur0, uint32_t *out)
{{
    struct hdr h_tcp;
    memset(&h_tcp, 0, sizeof h_tcp);
    h_tcp.hdr_len = hl;
    rg_bytes in_tcp = rg_bytes_make(p, len);
    uint32_t cur_tcp = cur0;
    unsigned err_tcp = 0;
{walk}
HE_tcp:
    *out = cur_tcp;
    return err_tcp;
}}""")
    return f"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rg/rg_common.h"
#include "rg/rg_pkt.h"
#include "rg/rg_stats.h"
const uint8_t rg_empty_byte[1]; /* the runtime's, without linking it */
struct hdr {{
{struct}
}};
{"".join(fn)}
/* each line: data offset (words), start cursor, bytes in hex; prints err cursor of both */
int main(void)
{{
    unsigned hl, cur0;
    char hex[1024];
    while (scanf("%u %u %1023s", &hl, &cur0, hex) == 3) {{
        size_t len = strlen(hex) / 2;
        uint8_t *p = malloc(len ? len : 1);
        for (size_t i = 0; i < len; i++) sscanf(hex + 2 * i, "%2hhx", &p[i]);
        if (strcmp(hex, "-") == 0) len = 0;
        uint32_t cf = 0, cl = 0;
        unsigned ef = full(p, len, hl, cur0, &cf), el = lean(p, len, hl, cur0, &cl);
        printf("%u %u %u %u\\n", ef, cf, el, cl);
        free(p);
    }}
    return 0;
}}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    tmp = tmp_path_factory.mktemp("leanwalk")
    src = tmp / "walks.c"
    src.write_text(_source())
    out = {}
    for lv in LEVELS:
        exe = tmp / f"walks{lv}"
        subprocess.run(
            ["cc", "-std=c11", lv, "-g", "-Wall", "-Wextra", "-Wno-unused-label"]
            + ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
            + ["-I", str(REPO / "runtime-c" / "include"), str(src), "-o", str(exe)],
            check=True,
        )
        out[lv] = exe
    return out


def _run(exe: Path, cases: list[tuple[int, int, bytes]]) -> list[tuple[int, ...]]:
    text = "".join(f"{hl} {cur} {data.hex() or '-'}\n" for hl, cur, data in cases)
    r = subprocess.run([str(exe)], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not r.stderr, r.stderr
    return [tuple(int(x) for x in line.split()) for line in r.stdout.splitlines()]


# option bytes drawn mostly from the kinds with special lengths, so real blocks come up often
_OPT = st.one_of(
    st.sampled_from([b"\x01", b"\x00", b"\x01\x01", b"\x02\x04\x05\xb4", b"\x03\x03\x07"]),
    st.sampled_from([b"\x04\x02", b"\x08\x0a"]).map(lambda t: t + bytes(8)),
    st.builds(
        lambda k, n, b: bytes([k, n]) + b,
        st.integers(0, 255),
        st.integers(0, 12),
        st.binary(max_size=12),
    ),
    st.binary(min_size=1, max_size=4),
)


@st.composite
def blocks(draw: st.DrawFn) -> tuple[int, int, bytes]:
    opts = b"".join(draw(st.lists(_OPT, max_size=8)))
    data = bytes(20) + opts + draw(st.binary(max_size=8))
    cut = draw(st.integers(0, len(data)))  # the captured length
    cur = draw(st.sampled_from([20, 20, 20, draw(st.integers(0, max(cut, 0)))]))
    hl = draw(st.integers(0, 15))
    return hl, min(cur, cut), data[:cut]


def test_walks_were_found() -> None:
    _, full, lean = _walks()
    assert "switch (" in full and "lens1_[" in lean and "RG_LIKELY" in lean


@settings(max_examples=60, deadline=None)
@given(st.lists(blocks(), min_size=20, max_size=40))
def test_lean_walk_agrees_with_the_full_walk(
    harness: dict[str, Path], cases: list[tuple[int, int, bytes]]
) -> None:
    for exe in harness.values():
        for case, (ef, cf, el, cl) in zip(cases, _run(exe, cases), strict=True):
            assert (ef, cf) == (el, cl), (exe.name, case)


def test_lean_walk_edges(harness: dict[str, Path]) -> None:
    """Hand-picked: timestamps crossing the data offset, an option past the captured bytes
    (fixed and length-byte ones), length 0 and 1, a block ending exactly at the bytes."""
    ts = b"\x01\x01\x08\x0a" + bytes(8)
    cases = [
        (8, 20, bytes(20) + ts),  # ends exactly at both
        (8, 20, bytes(20) + ts[:11]),  # timestamps cut by the capture: truncated
        (7, 20, bytes(20) + ts),  # timestamps crossing the data offset: walk ends past it
        (6, 20, bytes(20) + b"\x01\x05\x00\x01"),  # SACK length 0: n_ wraps, truncated
        (6, 20, bytes(20) + b"\x01\x22\x01\x01"),  # TFO length 1
        (15, 20, bytes(20) + b"\x02\x04\x05\xb4"),  # data offset past the capture
        (5, 20, bytes(20)),  # no options
        (6, 20, bytes(20) + b"\x01\x01\x01"),  # offset past a short capture
    ]
    results = _run(harness["-O2"], cases)
    for case, (ef, cf, el, cl) in zip(cases, results, strict=True):
        assert (ef, cf) == (el, cl), case
    # independent of either walk: what RFC 9293 option lengths say of these blocks
    assert results[0][:2] == (0, 32) and results[1][0] == 1  # 1 + RG_REASON_TRUNCATED
    assert results[2][:2] == (0, 32) and results[3][0] == 1 and results[4][0] == 1
    # the walk stops at the captured end (the bytes left to the data offset are opt_rest's)
    assert results[5][:2] == (0, 24) and results[7][:2] == (0, 23)
    assert results[6][:2] == (0, 20)


def test_harness_catches_a_wrong_walk(tmp_path: Path) -> None:
    """The comparison can fail: a lean walk without the truncation test of the option that
    reaches the data offset disagrees on a timestamps option cut by the capture."""
    _, _, lean = _walks()
    wrong = lean.replace("if (cur_tcp > in_tcp.len) {", "if (0) {")
    assert wrong != lean
    src, exe = tmp_path / "w.c", tmp_path / "w"
    src.write_text(_source(wrong))
    inc = str(REPO / "runtime-c" / "include")
    subprocess.run(["cc", "-std=c11", "-O1", "-I", inc, str(src), "-o", str(exe)], check=True)
    ts = b"\x01\x01\x08\x0a" + bytes(8)
    ((ef, _, el, _),) = _run(exe, [(7, 20, bytes(20) + ts[:11])])
    assert ef == 1 and el == 0
