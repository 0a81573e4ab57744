"""Turn pydantic validation errors into positioned diagnostics with hints."""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from rubikgen.diagnostics import Diagnostic
from rubikgen.source import Path, SourceMap


def _data_path(data: Any, loc: tuple[Any, ...]) -> Path:
    """Keep the loc components that exist in the data (drops union branch tags)."""
    out: list[str | int] = []
    cur = data
    for comp in loc:
        if isinstance(cur, dict) and isinstance(comp, str) and comp in cur:
            out.append(comp)
            cur = cur[comp]
        elif isinstance(cur, list) and isinstance(comp, int) and 0 <= comp < len(cur):
            out.append(comp)
            cur = cur[comp]
    return tuple(out)


def _value_at(data: Any, path: Path) -> Any:
    cur = data
    for comp in path:
        cur = cur[comp]
    return cur


def _aliases(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def _model_at(root: type[BaseModel], path: Path, data: Any) -> type[BaseModel] | None:
    """The model class whose mapping sits at `path` (best effort, for key hints)."""
    cur: Any = root
    val = data
    for comp in path:
        model = _unwrap_model(cur, val)
        if model is not None and isinstance(comp, str):
            field = None
            for n, f in model.model_fields.items():
                if (f.alias or n) == comp:
                    field = f
            if field is None:
                return None
            cur = field.annotation
        else:
            cur = _container_item(cur)
            if cur is None:
                return None
        val = val[comp] if isinstance(val, (dict, list)) else None
    return _unwrap_model(cur, val)


def _container_item(t: Any) -> Any:
    for arg in _flatten(t):
        origin = typing.get_origin(arg)
        if origin in (list, dict):
            args = typing.get_args(arg)
            return args[-1] if args else None
    return None


def _flatten(t: Any) -> list[Any]:
    origin = typing.get_origin(t)
    if origin is typing.Annotated:
        return _flatten(typing.get_args(t)[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        out: list[Any] = []
        for a in typing.get_args(t):
            out += _flatten(a)
        return out
    return [t]


def _unwrap_model(t: Any, val: Any) -> type[BaseModel] | None:
    models = [a for a in _flatten(t) if isinstance(a, type) and issubclass(a, BaseModel)]
    if not models:
        return None
    if len(models) == 1 or not isinstance(val, dict):
        return models[0]
    # Pick the model sharing the most keys with the value.
    return max(models, key=lambda m: len(set(_aliases(m)) & set(val)))


_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "bool_type": "true or false",
    "float_type": "a number",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "literal_error": None,
    "model_attributes_type": "a mapping",
}


def _describe_value(v: Any) -> str:
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if v is None:
        return "nothing (null)"
    return f"the string '{v}'" if len(str(v)) < 40 else "a string"


def _paths_of(diags: list[Diagnostic], smap: SourceMap) -> set[Path]:
    # Diagnostics carry no path; rebuild it from positions (keys and values both count).
    pos = {(d.line, d.col) for d in diags}
    out: set[Path] = set()
    for table in (smap.keys, smap.values):
        for p, v in table.items():
            if (v.line, v.col) in pos:
                out.add(p)
    return out


def convert(err: ValidationError, data: Any, smap: SourceMap, root: type[BaseModel]) -> list[Diagnostic]:
    by_path: dict[Path, list[dict[str, Any]]] = {}
    order: list[Path] = []
    out: list[Diagnostic] = []
    for e in err.errors(include_url=False):
        loc = tuple(e["loc"])
        dpath = _data_path(data, loc)
        if any(dpath[: len(r)] == r for r in smap.reported):
            continue  # the loader already reported this value (e.g. an unknown YAML tag)
        if e["type"] == "extra_forbidden":
            path = _data_path(data, loc)
            key = path[-1] if path else str(loc[-1])
            model = _model_at(root, path[:-1], data)
            options = _aliases(model) if model else []
            best = difflib.get_close_matches(str(key), options, n=1, cutoff=0.5)
            hint = f"did you mean '{best[0]}'?" if best else (f"allowed keys: {', '.join(options)}" if options else None)
            where = f" in {model.__name__.lower()}" if model else ""
            out.append(smap.diag("RG005", f"unknown key '{key}'{where}", path, key=True, hint=hint))
            continue
        if e["type"] == "missing":
            path = _data_path(data, loc[:-1])
            name = loc[-1]
            if not isinstance(_value_at(data, path), dict):
                path_diag = smap.diag("RG006", f"expected a mapping, got {_describe_value(_value_at(data, path))}", path)
                out.append(path_diag)
                continue
            out.append(smap.diag("RG004", f"missing required key '{name}'", path, key=bool(path),
                                 hint=f"add '{name}:'"))
            continue
        path = _data_path(data, loc)
        if path not in by_path:
            order.append(path)
        by_path.setdefault(path, []).append(e)
    reported = {p for p in order} | {d_path for d_path in _paths_of(out, smap)}
    for path in order:
        errs = by_path[path]
        value = _value_at(data, path)
        if isinstance(value, (dict, list)) and any(q[: len(path)] == path and len(q) > len(path) for q in reported):
            # A union member matched the shape and reported deeper errors: those are the useful ones.
            continue
        custom = [e for e in errs if e["type"] in ("step", "statement")]
        if custom:
            out.append(smap.diag("RG006", custom[0]["msg"], path))
            continue
        wants: list[str] = []
        for e in errs:
            if e["type"] == "literal_error":
                wants.append("one of " + e["ctx"]["expected"])
            elif e["type"] == "too_short":
                n = e["ctx"]["min_length"]
                wants.append(f"at least {n} item{'s' if n != 1 else ''}")
            elif e["type"] == "too_long":
                n = e["ctx"]["max_length"]
                wants.append(f"at most {n} item{'s' if n != 1 else ''}")
            elif e["type"] in _TYPE_WORDS and _TYPE_WORDS[e["type"]]:
                wants.append(_TYPE_WORDS[e["type"]])
            else:
                wants.append(e["msg"].lower())
        uniq = list(dict.fromkeys(w for w in wants if w))
        if len(uniq) == 1 and uniq[0].startswith(("at least", "at most")):
            msg = f"expected {uniq[0]}, got {len(value) if isinstance(value, (list, dict)) else 0}"
        else:
            msg = f"expected {' or '.join(uniq)}, got {_describe_value(value)}"
        hint = None
        if isinstance(value, str) and "an integer" in uniq:
            hint = "write the number without quotes"
        elif value is None:
            hint = "the value is empty; write it after the colon"
        out.append(smap.diag("RG006", msg, path, hint=hint))
    return out
