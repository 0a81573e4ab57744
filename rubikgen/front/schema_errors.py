"""Turn pydantic validation errors into positioned diagnostics with hints."""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from rubikgen.front.diagnostics import Diagnostic
from rubikgen.front.source import Path, SourceMap


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
    val: Any = data
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
        # a list indexed by a key (the data has a list where the model has a mapping): nothing
        indexable = isinstance(val, dict) or (isinstance(val, list) and isinstance(comp, int))
        val = val[comp] if indexable else None
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


# How diagnostics name the mapping a key belongs to.
_MODEL_WORDS = {
    "Protocol": "a protocol",
    "Stack": "a stack",
    "FieldSpec": "a field",
    "Param": "a parameter",
    "Selector": "the selector",
    "Sequence": "the sequence",
    "PSM": "psm",
    "Transition": "a transition",
    "Event": "an event",
    "AnyUntil": "any_until",
    "AnyUntilStep": "a header step",
    "IfStep": "an if step",
    "ElifStep": "an elif step",
    "ElseStep": "an else step",
    "IfStmt": "an if statement",
    "ElifStmt": "an elif statement",
    "ElseStmt": "an else statement",
    "Callback": "a callback",
    "Transform": "a transform",
    "TypedArg": "a typed argument",
    "LayerInst": "a layer",
    "Edge": "an edge",
    "Handler": "a handler",
    "RejectOptions": "reject's options",
}

# Keys that select the kind of a header step or statement (see the models' discriminators).
_TAG_KEYS = {
    "step": ("a header step", ("if", "elif", "else", "any_until")),
    "statement": ("a statement", ("if", "elif", "else", "callback", "transform")),
    "action": ("an action", ("rewrite", "reject", "clamp-mss")),
}


def _join_or(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def convert(
    err: ValidationError, data: Any, smap: SourceMap, root: type[BaseModel]
) -> list[Diagnostic]:
    by_path: dict[Path, list[dict[str, Any]]] = {}
    order: list[Path] = []
    out: list[Diagnostic] = []
    errors: list[Any] = []  # pydantic's ErrorDetails
    e: Any
    for e in err.errors(include_url=False):
        dpath = _data_path(data, tuple(e["loc"]))
        if any(dpath[: len(r)] == r for r in smap.reported):
            continue  # the loader already reported this value (e.g. an unknown YAML tag)
        errors.append(e)
    # Unknown keys first: a misspelt required key is reported once, as the unknown key.
    suggested: set[tuple[Path, str]] = set()
    for e in errors:
        loc = tuple(e["loc"])
        if e["type"] != "extra_forbidden":
            continue
        path = _data_path(data, loc)
        key = path[-1] if path else str(loc[-1])
        model = _model_at(root, path[:-1], data)
        options = _aliases(model) if model else []
        best = difflib.get_close_matches(str(key), options, n=1, cutoff=0.5)
        if best:
            suggested.add((path[:-1], best[0]))
        hint = (
            f"did you mean '{best[0]}'?"
            if best
            else (f"allowed keys: {', '.join(options)}" if options else None)
        )
        where = f" in {_MODEL_WORDS.get(model.__name__, model.__name__.lower())}" if model else ""
        out.append(smap.diag("RG005", f"unknown key '{key}'{where}", path, key=True, hint=hint))
    for e in errors:
        loc = tuple(e["loc"])
        if e["type"] == "extra_forbidden":
            continue
        if e["type"] == "missing":
            path = _data_path(data, loc[:-1])
            name = loc[-1]
            if not isinstance(_value_at(data, path), dict):
                path_diag = smap.diag(
                    "RG006",
                    f"expected a mapping, got {_describe_value(_value_at(data, path))}",
                    path,
                )
                out.append(path_diag)
                continue
            if (path, name) in suggested:
                continue
            out.append(
                smap.diag(
                    "RG004",
                    f"missing required key '{name}'",
                    path,
                    key=bool(path),
                    hint=f"add '{name}:'",
                )
            )
            continue
        path = _data_path(data, loc)
        if "[key]" in loc:
            # A mapping key of the wrong kind (e.g. an unknown link type): report the key itself.
            kname = path[-1] if path else ""
            exp = e.get("ctx", {}).get("expected", "") if e["type"] == "literal_error" else ""
            options = [
                o.strip().strip("'") for o in exp.replace(" or ", ", ").split(",") if o.strip()
            ]
            best = (
                difflib.get_close_matches(str(kname), options, n=1, cutoff=0.5) if options else []
            )
            want = f"one of {exp}" if exp else e["msg"].lower()
            out.append(
                smap.diag(
                    "RG005",
                    f"unknown key '{kname}': expected {want}",
                    path,
                    key=True,
                    hint=f"did you mean '{best[0]}'?" if best else None,
                )
            )
            continue
        if path not in by_path:
            order.append(path)
        by_path.setdefault(path, []).append(e)
    reported = {p for p in order} | {d_path for d_path in _paths_of(out, smap)}
    for path in order:
        errs = by_path[path]
        value = _value_at(data, path)
        if isinstance(value, (dict, list)) and any(
            q[: len(path)] == path and len(q) > len(path) for q in reported
        ):
            # A union member matched the shape and reported deeper errors: those are the useful ones.
            continue
        custom = [e for e in errs if e["type"] in _TAG_KEYS]
        if custom:
            what, tags = _TAG_KEYS[custom[0]["type"]]
            close: list[Any] = (
                [(k, difflib.get_close_matches(str(k), tags, n=1, cutoff=0.6)) for k in value]
                if isinstance(value, dict)
                else []
            )
            close = [(k, m[0]) for k, m in close if m]
            if close:
                k, m = close[0]
                out.append(
                    smap.diag(
                        "RG005",
                        f"unknown key '{k}' in {what}",
                        path + (k,),
                        key=True,
                        hint=f"did you mean '{m}'?",
                    )
                )
            else:
                out.append(smap.diag("RG006", custom[0]["msg"], path))
            continue
        wants: list[str] = []
        literal_hint: str | None = None
        for e in errs:
            if e["type"] == "literal_error":
                exp = e["ctx"]["expected"]
                wants.append(exp if "," not in exp and " or " not in exp else "one of " + exp)
                if isinstance(value, str):
                    options = [
                        o.strip().strip("'")
                        for o in exp.replace(" or ", ", ").split(",")
                        if o.strip()
                    ]
                    close = difflib.get_close_matches(value, options, n=1, cutoff=0.5)
                    if close:
                        literal_hint = f"did you mean '{close[0]}'?"
            elif e["type"] == "too_short":
                n = e["ctx"]["min_length"]
                wants.append(f"at least {n} item{'s' if n != 1 else ''}")
            elif e["type"] == "too_long":
                n = e["ctx"]["max_length"]
                wants.append(f"at most {n} item{'s' if n != 1 else ''}")
            elif e["type"] in ("less_than_equal", "greater_than_equal"):
                bound = "at most" if e["type"] == "less_than_equal" else "at least"
                lim = e["ctx"]["le" if e["type"] == "less_than_equal" else "ge"]
                wants.append(f"a number {bound} {lim}")
            elif e["type"] in _TYPE_WORDS and _TYPE_WORDS[e["type"]]:
                wants.append(_TYPE_WORDS[e["type"]] or "")
            else:
                wants.append(e["msg"].lower())
        uniq = list(dict.fromkeys(w for w in wants if w))
        if "a number" in uniq and "an integer" in uniq:
            uniq.remove("an integer")
        if len(uniq) == 1 and uniq[0].startswith(("at least", "at most")):
            msg = f"expected {uniq[0]}, got {len(value) if isinstance(value, (list, dict)) else 0}"
        else:
            msg = f"expected {_join_or(uniq)}, got {_describe_value(value)}"
        hint = literal_hint
        if isinstance(value, str) and "an integer" in uniq and value.strip().isdigit():
            hint = "write the number without quotes"
        elif value is None:
            hint = "the value is empty; write it after the colon"
        elif isinstance(value, (str, int)) and "a list" in uniq:
            hint = f"write [{value}] for a list of one item"
        out.append(smap.diag("RG006", msg, path, hint=hint))
    return out
