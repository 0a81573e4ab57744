"""NF chain files (`--chain chain.yaml`): the model, and their validation with positions.

A chain file lists network functions in chain order; the capture driver loads them
(runtime-c/main/rg_chainfile.c) and calls them in that order for every packet. `rubikgen
validate` checks chain files like specs (file:line:col, a hint), against the model below (its
JSON Schema is schema/chain.schema.json).
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
    ValidationError,
)

from rubikgen.front.diagnostics import Diagnostic, SourceCache
from rubikgen.models.common import Model
from rubikgen.toolchain.resources import nf_dir


def _stock_nfs() -> tuple[str, ...]:
    """The NFs built into every stack binary, read from their registry (the RG_STOCK_NFS list
    of handlers/nf/rg_nf.c, whose order rg_nf_table has): adding a stock NF touches no Python.
    A test (tests/runtime/test_nf_chain.py) compares them with what a binary's --help lists."""
    try:
        text = (nf_dir() / "rg_nf.c").read_text(encoding="utf-8")
    except OSError:
        return ()
    m = re.search(r"^#define RG_STOCK_NFS\(X\)((?:.*\\\n)*.*)$", text, re.M)
    return tuple(re.findall(r"X\((\w+)\)", m.group(1))) if m else ()


STOCK_NFS = _stock_nfs()

ParamValue = StrictStr | StrictInt | StrictFloat | StrictBool
# events between NFs: names and payload fields (the driver's limits: rg_nfchain.h)
EventName = Annotated[StrictStr, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,62}$")]
FieldName = Annotated[StrictStr, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")]
FieldType = Literal["num", "bytes"]
Fields = Annotated[dict[FieldName, FieldType], Field(max_length=16)]


class ChainItem(Model):
    """One NF of the chain."""

    nf: StrictStr = Field(
        min_length=1,
        description="A stock NF's name (streams, flowstats, ...: a stack binary's --help lists "
        "them all) or the path of an NF "
        "built as a shared object (a path with a '/' or ending in .so; relative to the chain "
        "file's directory).",
    )
    name: StrictStr | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$",
        description="The instance name (`rubikgen ctl detach NAME`); default: the NF's own "
        "name. Names are unique in a chain.",
    )
    params: dict[str, ParamValue] | None = Field(
        default=None,
        description="The NF's configuration: names to scalars (the NF reads them as text). "
        "`out` defaults to the driver's --out directory.",
    )
    raises: list[EventName] | None = Field(
        default=None,
        description="The chain's events (top-level `events`) this NF raises "
        "(rg_nf_host.raise, docs/nf.md).",
    )
    subscribes: list[EventName] | dict[EventName, Fields | None] | None = Field(
        default=None,
        description="The chain's events this NF subscribes to, raised by an NF before it; "
        "as a mapping, with the payload fields it reads and their types.",
    )


class ChainFile(Model):
    """A chain of network functions, called in this order on every packet."""

    events: Annotated[dict[EventName, Fields | None], Field(max_length=64)] | None = Field(
        default=None,
        description="Events between NFs: each event's payload fields and their types (num: "
        "a number, bytes: a byte string); an NF raises an event its item lists under "
        "`raises`, and the NFs after it that list it under `subscribes` get it.",
    )
    chain: list[ChainItem] = Field(
        min_length=1, max_length=32, description="The NFs in chain order (at most 32)."
    )


def is_chain_document(data: Any) -> bool:
    return isinstance(data, dict) and "chain" in data and not {"protocol", "stack"} & set(data)


def is_path(nf: str) -> bool:
    """An NF given by its shared object's path (the driver's rule, rg_nfchain.c)."""
    return "/" in nf or nf.endswith(".so")


@dataclass
class ChainCheck:
    diags: list[Diagnostic] = field(default_factory=list)
    data: dict[str, Any] | None = None


def check_chain_text(file: str, text: str, sources: SourceCache | None = None) -> ChainCheck:
    """Diagnostics of a chain file: YAML, the schema, unique names, NFs that exist."""
    from rubikgen.front.schema_errors import convert
    from rubikgen.front.source import load_yaml

    out = ChainCheck()
    if sources is not None:
        sources.add(file, text)
    loaded = load_yaml(file, text)
    if loaded.diags:
        out.diags += loaded.diags
        return out
    smap, data = loaded.smap, loaded.data
    if not isinstance(data, dict):
        out.diags.append(
            smap.diag(
                "RG006",
                "expected a mapping at the top level",
                (),
                hint="a chain file is `chain:` with a list of `- nf: NAME_OR_PATH.so`",
            )
        )
        return out
    try:
        ChainFile.model_validate(data)
    except ValidationError as e:
        out.diags += convert(e, data, smap, ChainFile)
        return out
    seen: dict[str, int] = {}
    base = os.path.dirname(file)
    for i, item in enumerate(data["chain"]):
        nf = item["nf"]
        name = item.get("name") or (os.path.basename(nf).removesuffix(".so") if is_path(nf) else nf)
        if name in seen:
            out.diags.append(
                smap.diag(
                    "RG022",
                    f"two NFs of the chain are called '{name}' (item {seen[name] + 1} and this one)",
                    ("chain", i, "name") if item.get("name") else ("chain", i, "nf"),
                    hint="give one of them another `name:`",
                )
            )
        seen.setdefault(name, i)
        if is_path(nf):
            path = nf if os.path.isabs(nf) else os.path.join(base, nf)
            if not os.path.isfile(path):
                out.diags.append(
                    smap.diag(
                        "RG007",
                        f"no such NF shared object: {path}",
                        ("chain", i, "nf"),
                        hint="build it with `cc -shared -fPIC -std=c11 -Iruntime-c/include "
                        "NF.c -o NF.so` (docs/nf.md)",
                    )
                )
        elif nf not in STOCK_NFS:
            out.diags.append(
                smap.diag(
                    "RG011",
                    f"unknown NF '{nf}'",
                    ("chain", i, "nf"),
                    hint=f"the stock NFs are {', '.join(STOCK_NFS)}; a shared object is given "
                    "by a path (with a '/' or ending in .so)",
                )
            )
    out.diags += _check_events(data, smap)
    out.data = data
    return out


def _check_events(data: dict[str, Any], smap: Any) -> list[Diagnostic]:
    """Events between NFs: names that are declared, field types that match, every
    subscriber after an NF raising its event (delivery goes down the chain), no cycles."""
    diags: list[Diagnostic] = []
    events: dict[str, dict[str, str]] = {k: v or {} for k, v in (data.get("events") or {}).items()}
    items: list[dict[str, Any]] = data["chain"]
    raisers: dict[str, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        for j, ev in enumerate(item.get("raises") or []):
            raisers[ev].append(i)
            if ev not in events:
                diags.append(_unknown(smap, ev, ("chain", i, "raises", j), False, events))

    def subs(item: dict[str, Any]) -> list[tuple[str, dict[str, str], tuple[Any, ...], bool]]:
        s = item.get("subscribes") or []
        if isinstance(s, list):
            return [(ev, {}, (j,), False) for j, ev in enumerate(s)]
        return [(ev, f or {}, (ev,), True) for ev, f in s.items()]

    # NF -> NF edges (raiser -> subscriber), for cycles
    edges: dict[int, set[int]] = defaultdict(set)
    for i, item in enumerate(items):
        for ev, _f, _p, _k in subs(item):
            edges.update({r: edges[r] | {i} for r in raisers.get(ev, [])})
    cyclic = _cyclic(len(items), edges)
    for i, item in enumerate(items):
        for ev, fields, p, key in subs(item):
            path = ("chain", i, "subscribes", *p)
            if ev not in events:
                diags.append(_unknown(smap, ev, path, key, events))
                continue
            for f, t in fields.items():
                want = events[ev].get(f)
                if want != t:
                    diags.append(
                        smap.diag(
                            "RG012" if want else "RG011",
                            f"event '{ev}' has a field '{f}' of type {want}, not {t}"
                            if want
                            else f"event '{ev}' has no field '{f}'",
                            (*path, f),
                            key=not want,
                            hint=f"its fields: {_fields(events[ev])}",
                        )
                    )
            before = [r for r in raisers.get(ev, []) if r < i]
            after = [r for r in raisers.get(ev, []) if r >= i]
            if after and (i in cyclic or i in after):
                loop = " -> ".join(_nf_name(items[k]) for k in cyclic[i])
                diags.append(
                    smap.diag(
                        "RG040",
                        f"events between NFs form a cycle: {loop}",
                        path,
                        key=key,
                        hint="an NF gets only what NFs before it raise: break the cycle",
                    )
                    if i in cyclic
                    else smap.diag(
                        "RG040",
                        f"NF '{_nf_name(item)}' subscribes to '{ev}', which it raises itself",
                        path,
                        key=key,
                        hint="an NF does not get its own events",
                    )
                )
            elif not before:
                diags.append(
                    smap.diag(
                        "RG038",
                        f"'{ev}' is raised by no NF before this one in the chain"
                        + (f" (item {after[0] + 1} raises it, after)" if after else ""),
                        path,
                        key=key,
                        hint="an event goes to the NFs after the one raising it: move this NF "
                        "after a raiser",
                    )
                )
    return diags


def _nf_name(item: dict[str, Any]) -> str:
    nf: str = item["nf"]
    return item.get("name") or (os.path.basename(nf).removesuffix(".so") if is_path(nf) else nf)


def _fields(fields: dict[str, str]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in fields.items()) or "none"


def _unknown(
    smap: Any, ev: str, path: tuple[Any, ...], key: bool, events: dict[str, dict[str, str]]
) -> Diagnostic:
    d: Diagnostic = smap.diag(
        "RG041",
        f"the chain file declares no event '{ev}'",
        path,
        key=key,
        hint=f"declare it under the top-level `events` (declared: {', '.join(events) or 'none'})",
    )
    return d


def _cyclic(n: int, edges: dict[int, set[int]]) -> dict[int, list[int]]:
    """The NFs on a cycle of edges (i -> j: j subscribes to what i raises), each with the
    cycle through it (from it back to it)."""
    out: dict[int, list[int]] = {}
    for start in range(n):
        stack: list[tuple[int, list[int]]] = [(start, [start])]
        seen: set[int] = set()
        while stack and start not in out:
            node, path = stack.pop()
            for nxt in sorted(edges.get(node, ())):
                if nxt == start and len(path) > 1:
                    out[start] = [*path, start]
                    break
                if nxt not in seen and nxt != start:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    return out


def check_chain_file(file: str, sources: SourceCache | None = None) -> ChainCheck:
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        return ChainCheck([Diagnostic("RG007", f"cannot read: {e}", file, 1, 1)])
    return check_chain_text(file, text, sources)
