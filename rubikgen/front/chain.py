"""NF chain files (`--chain chain.yaml`): the model, and their validation with positions.

A chain file lists network functions in chain order; the capture driver loads them
(runtime-c/main/rg_chainfile.c) and calls them in that order for every packet. `rubikgen
validate` checks chain files like specs (file:line:col, a hint), against the model below (its
JSON Schema is schema/chain.schema.json).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

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


class ChainFile(Model):
    """A chain of network functions, called in this order on every packet."""

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
    out.data = data
    return out


def check_chain_file(file: str, sources: SourceCache | None = None) -> ChainCheck:
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        return ChainCheck([Diagnostic("RG007", f"cannot read: {e}", file, 1, 1)])
    return check_chain_text(file, text, sources)
