"""Compare what a stack's binary wrote (events, streams, flowstats, summary) with a case's
expectations; every mismatch is a diagnostic at the expectation it breaks."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Protocol

from rubikgen.front.source import Path as DocPath
from rubikgen.spectest.packets import byte_value


class Report(Protocol):
    """err(message, path, key): at the key of path (a whole list) when key, else its value."""

    def __call__(self, message: str, where: DocPath, key: bool = False) -> None: ...


ENDPOINT_KEYS = ("layer", "src", "dst", "sport", "dport", "dir", "sid")


def show(b: bytes, limit: int = 48) -> str:
    """Bytes as a short Python-like literal for messages."""
    text = repr(b[:limit])[1:]
    return text + ("..." if len(b) > limit else "") + f" ({len(b)} bytes)"


def _arg_matches(want: Any, got: Any) -> tuple[bool, str]:
    """(equal, how got looks) for one handler argument of an events line."""
    if isinstance(got, dict):  # bytes: {"len","hex" (first 64 bytes),"sha256"}
        if not isinstance(want, (str, dict)):
            return False, f"bytes ({got['len']})"
        wb = byte_value(want)
        shown = bytes.fromhex(got["hex"])
        desc = show(shown) if got["len"] <= len(shown) else f"{show(shown)[:-1]}, of {got['len']}"
        return hashlib.sha256(wb).hexdigest() == got["sha256"], desc
    if isinstance(want, (str, dict)):
        return False, f"the number {got}"
    return int(want) == got, str(got)


def _want_text(want: Any) -> str:
    return show(byte_value(want)) if isinstance(want, (str, dict)) else str(int(want))


def calls(
    want: list[dict[str, Any]], got: list[dict[str, Any]], path: DocPath, err: Report
) -> None:
    """The handler calls, one by one in order; stops at the first call that differs (later
    ones would only repeat the shift)."""
    for i, w in enumerate(want):
        p = (*path, i)
        if i >= len(got):
            err(
                f"expected a call of {w['handler']} here, but the stack made only {len(got)} calls",
                p,
            )
            return
        g = got[i]
        bad = False
        for key in ("handler", "layer", "dir", "pkt"):
            if w.get(key) is not None and w[key] != g.get(key):
                err(f"call {i + 1}: {key} is {g.get(key)!r}, expected {w[key]!r}", (*p, key))
                bad = True
        if w.get("end") is not None and w["end"] != g.get("end"):
            got_end = g.get("end") or "none (a call made in a packet)"
            err(f"call {i + 1}: end is {got_end}, expected {w['end']}", (*p, "end"))
            bad = True
        if w["handler"] == g.get("handler"):
            for name, val in (w.get("args") or {}).items():
                if name not in g["args"]:
                    have = ", ".join(g["args"]) or "none"
                    err(
                        f"{g['handler']} has no argument '{name}' (its arguments: {have})",
                        (*p, "args", name),
                    )
                    bad = True
                    continue
                ok, shown = _arg_matches(val, g["args"][name])
                if not ok:
                    err(
                        f"call {i + 1} ({g['handler']}, packet {g.get('pkt')}): {name} is "
                        f"{shown}, expected {_want_text(val)}",
                        (*p, "args", name),
                    )
                    bad = True
        if bad:
            return
    if len(got) > len(want):
        g = got[len(want)]
        err(
            f"the stack made {len(got) - len(want)} more call(s) than expected; the first: "
            f"{g.get('handler')} ({g.get('dir')}, packet {g.get('pkt')})",
            path,
            True,
        )


def gaps(want: list[dict[str, Any]], got: list[dict[str, Any]], path: DocPath, err: Report) -> None:
    for i, w in enumerate(want):
        if i >= len(got):
            err(f"expected a gap here, but the stack skipped only {len(got)}", (*path, i))
            return
        for key, val in w.items():
            if val is not None and got[i].get(key) != val:
                err(f"gap {i + 1}: {key} is {got[i].get(key)!r}, expected {val!r}", (*path, i, key))
    if len(got) > len(want):
        g = got[len(want)]
        err(
            f"{len(got) - len(want)} more gap(s) than expected; the first: {g.get('layer')} "
            f"{g.get('dir')} seq {g.get('seq')} len {g.get('len')}",
            path,
            True,
        )


def _endpoints(line: dict[str, Any]) -> str:
    s = f"{line.get('layer')} {line.get('src')}"
    if line.get("sport") is not None:
        s += f":{line['sport']} -> {line.get('dst')}:{line.get('dport')}"
    else:
        s += f" -> {line.get('dst')}"
    if line.get("dir"):
        s += f" {line['dir']}"
    if line.get("sid") is not None:
        s += f" sid {line['sid']}"
    return s


def _candidates(w: dict[str, Any], lines: list[dict[str, Any]], used: set[int]) -> list[int]:
    return [
        j
        for j, line in enumerate(lines)
        if j not in used and all(w.get(k) is None or line.get(k) == w[k] for k in ENDPOINT_KEYS)
    ]


def _check_fields(w: dict[str, Any], line: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    return [k for k in keys if w.get(k) is not None and line.get(k) != w[k]]


def streams(
    want: list[dict[str, Any]],
    lines: list[dict[str, Any]],
    data_of: Callable[[dict[str, Any]], bytes],
    path: DocPath,
    err: Report,
) -> None:
    """Each expected direction matched to one line of flows.jsonl (by its endpoints, then its
    bytes); lines that delivered bytes and match no expectation are errors."""
    used: set[int] = set()
    for i, w in enumerate(want):
        p = (*path, i)
        cands = _candidates(w, lines, used)
        if not cands:
            err(
                "no flow direction matches "
                + ", ".join(f"{k}={w[k]}" for k in ENDPOINT_KEYS if w.get(k) is not None)
                + f" (directions: {'; '.join(_endpoints(x) for x in lines) or 'none'})",
                p,
            )
            continue
        wb = byte_value(w["data"])
        same = [j for j in cands if data_of(lines[j]) == wb]
        fields = ("complete", "close", "gaps")
        best = next((j for j in same if not _check_fields(w, lines[j], fields)), None)
        j = best if best is not None else (same or cands)[0]
        used.add(j)
        line = lines[j]
        if j not in same:
            err(
                f"{_endpoints(line)}: delivered {show(data_of(line))}, expected {show(wb)}",
                (*p, "data"),
            )
        for k in _check_fields(w, line, fields):
            err(f"{_endpoints(line)}: {k} is {line.get(k)!r}, expected {w[k]!r}", (*p, k))
    for j, line in enumerate(lines):
        if j not in used and line.get("bytes"):
            err(f"unexpected stream {_endpoints(line)}: {show(data_of(line))}", path, True)


def flows(
    want: list[dict[str, Any]], lines: list[dict[str, Any]], path: DocPath, err: Report
) -> None:
    used: set[int] = set()
    fields = ("close", "complete", "state", "packets", "bytes")
    for i, w in enumerate(want):
        p = (*path, i)
        cands = _candidates(w, lines, used)
        if not cands:
            err(
                "no instance matches "
                + ", ".join(f"{k}={w[k]}" for k in ENDPOINT_KEYS if w.get(k) is not None)
                + f" (instances: {'; '.join(_endpoints(x) for x in lines) or 'none'})",
                p,
            )
            continue
        j = next((j for j in cands if not _check_fields(w, lines[j], fields)), cands[0])
        used.add(j)
        for k in _check_fields(w, lines[j], fields):
            err(f"{_endpoints(lines[j])}: {k} is {lines[j].get(k)!r}, expected {w[k]!r}", (*p, k))
    for j, line in enumerate(lines):
        if j not in used:
            err(
                f"unexpected instance {_endpoints(line)} (close {line.get('close')}, packets "
                f"{line.get('packets')})",
                path,
                True,
            )


def summary(want: dict[str, int], got: dict[str, Any], path: DocPath, err: Report) -> None:
    for k, v in want.items():
        if not isinstance(got.get(k), int):
            keys = ", ".join(x for x, y in got.items() if isinstance(y, int))
            err(f"the summary has no number '{k}' (it has: {keys})", (*path, k))
        elif got[k] != v:
            err(f"summary {k} is {got[k]}, expected {v}", (*path, k))
