"""Shared pieces of the document models."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

# An expression is written as a string; YAML scalars like `true` or `0` are accepted too.
Expr = Annotated[
    StrictStr | StrictBool | StrictInt,
    Field(description="An expression (see docs/spec-language.md section 2)."),
]


def expr_text(e: Any) -> str:
    if isinstance(e, bool):
        return "true" if e else "false"
    return str(e)


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=False)


class TypedArg(Model):
    """A callback argument with an explicit C type."""

    value: Expr
    type: Literal["u8", "u16", "u32", "u64", "bytes"]


CallArg = Annotated[Expr | TypedArg, Field(description="An expression, or {value, type}.")]


class Callback(Model):
    """Call a handler implemented in C with named, typed arguments."""

    callback: StrictStr = Field(description="Handler name (a C identifier).")
    args: dict[str, CallArg] = Field(default_factory=dict)
    doc: StrictStr | None = None


class Transform(Model):
    """Replace the sdu by what a runtime-provided transform makes of its arguments."""

    transform: StrictStr = Field(description="Transform name (see docs/spec-language.md 2.6).")
    args: dict[str, Expr] = Field(default_factory=dict)
    doc: StrictStr | None = None
