"""Name resolution for expressions of one protocol, with its parameter layers bound."""

from __future__ import annotations

from dataclasses import replace

from rubikgen.expr.types import BOOL, BytesT, NumT, Resolved, Type
from rubikgen.sema.builtins import (
    BUILTIN_EVENTS,
    BUILTIN_VALUE_TABLE,
    FRAME_VALUES,
    FUNCTIONS,
    STATE_T,
    Context,
)
from rubikgen.sema.symbols import FieldInfo, ProtocolInfo, VarInfo


def field_type(f: FieldInfo | VarInfo) -> Type:
    if f.kind == "num":
        return NumT(f.width or 64)
    return BytesT(f.size)


class ProtocolScope:
    """Resolves names in one context of one protocol (see builtins.Context)."""

    def __init__(
        self,
        info: ProtocolInfo,
        params: dict[str, ProtocolInfo],
        ctx: Context,
        owners: dict[str, str] | None = None,
    ) -> None:
        self.info = info
        self.params = params
        self.ctx = ctx
        # param -> the stack layer it is bound to, when resolving one layer of a stack
        self.owners = owners or {}
        # Names that exist but are not available in this context, with the reason.
        self.unavailable: dict[tuple[str, ...], str] = {}

    # -- full resolution, ignoring the context --------------------------------------------
    def _resolve_all(self, parts: tuple[str, ...]) -> tuple[Resolved | None, str | None]:
        """Returns (resolution, the context flag it needs)."""
        info = self.info
        n = len(parts)
        if n == 1:
            p = parts[0]
            if p == "ready_upto":  # the function's availability (expr/check.py)
                if info.model.sequence is None:
                    return None, None
                return Resolved(BOOL, "builtin"), "seq"
            bv = BUILTIN_VALUE_TABLE.get(p)
            if bv is not None:
                if (
                    (bv.needs == "direction" and not info.bidirectional)
                    or (bv.needs == "psm" and not info.states)
                    or (p in FRAME_VALUES and info.model.framing is None)
                ):
                    return None, None
                return Resolved(bv.type, "builtin"), bv.needs
            if p in info.states:
                return Resolved(STATE_T, "state"), None
            return None, None
        if n == 2:
            ns, name = parts
            if ns == "option" and name in info.model.options:  # a constant per layer
                d = info.model.options[name].default
                return Resolved(BOOL if isinstance(d, bool) else NumT(64), "option"), None
            if ns == "header" and name in info.fields:
                return Resolved(field_type(info.fields[name]), "field"), "header"
            if ns == "temp" and name in info.temps:
                return Resolved(field_type(info.temps[name]), "temp", assignable=True), "temp"
            if ns == "perm" and name in info.perms:
                return Resolved(field_type(info.perms[name]), "perm", assignable=True), "perm"
            if ns == "psm" and name in info.transitions:
                return Resolved(BOOL, "transition"), "fired"
            if ns == "event" and (name in info.events or name in BUILTIN_EVENTS):
                return Resolved(BOOL, "event"), "fired"
            if ns == "layout" and name in info.layouts:
                return Resolved(BOOL, "layout"), "packet"
            return None, None
        if n == 3 and parts[0] == "v":
            r, need = self._resolve_all(parts[1:])
            if r is not None and r.kind in ("field", "temp"):
                return Resolved(r.type, r.kind, virtual=True), need
            return None, None
        if n == 3 and parts[0] in info.param_files and parts[0] not in self.params:
            # The parameter's protocol could not be loaded (reported there): don't cascade.
            return Resolved(NumT(64), "foreign_field", assignable=parts[1] == "perm"), "foreign"
        if n == 3 and parts[0] in self.params:
            other = self.params[parts[0]]
            ns, name = parts[1], parts[2]
            if ns == "header" and name in other.fields:
                return Resolved(field_type(other.fields[name]), "foreign_field"), "foreign"
            if ns == "perm" and name in other.perms:
                return Resolved(
                    field_type(other.perms[name]), "foreign_perm", assignable=True
                ), "foreign"
            if ns == "temp" and name in other.temps:
                return Resolved(field_type(other.temps[name]), "foreign_temp"), "foreign"
        return None, None

    def resolve(self, parts: tuple[str, ...]) -> Resolved | None:
        r, need = self._resolve_all(parts)
        if r is None:
            return None
        if need is not None and not getattr(self.ctx, need):
            self.unavailable[parts] = self.ctx.why
            return None
        lk = self.info.model.lookup
        if r.kind.startswith("foreign") and lk is not None and parts[0] == lk.table:
            self.unavailable[parts] = (
                f"'{lk.table}' is the lookup's table: only its instances are searched, its "
                "layer is not parsed on this packet"
            )
            return None
        if r.kind.startswith("foreign") and parts[0] in self.owners:
            r = replace(r, owner=self.owners[parts[0]])
        return r

    def why_missing(self, parts: tuple[str, ...]) -> str | None:
        """Why a name that exists in other protocols does not exist in this one."""
        info = self.info
        if parts[0] in FRAME_VALUES and info.model.framing is None:
            return f"{parts[0]} exists only in a protocol with framing"
        if parts[0] in ("to_active", "to_passive") and not info.bidirectional:
            return f"{parts[0]} tells the direction of a bidirectional instance: give the selector 'sides'"
        if parts == ("current_state",) and not info.states:
            return "current_state exists only in a protocol with a psm"
        if parts[0] == "psm" and not info.transitions:
            return "psm.T names a transition of this protocol's psm, and it has none"
        if len(parts) == 2 and parts[0] == "temp" and parts[1] not in info.temps:
            return f"declare it under 'temp:', e.g. temp: {{{parts[1]}: 32}}"
        if len(parts) == 2 and parts[0] == "perm" and parts[1] not in info.perms:
            return f"declare it under 'perm:', e.g. perm: {{{parts[1]}: {{bits: 32, init: \"0\"}}}}"
        if parts[0] == "v" and len(parts) >= 2 and parts[1] not in ("header", "temp"):
            return "virtual references are v.header.X or v.temp.X"
        if (
            len(parts) == 3
            and parts[0] not in self.params
            and parts[1] in ("header", "perm", "temp")
        ):
            if info.param_files or self.params:
                return f"'{parts[0]}' is not a parameter; parameters: {', '.join(info.param_files or self.params)}"
            return f"'{parts[0]}' is not a parameter of this protocol; declare it under params to read another layer"
        return None

    def candidates(self, parts: tuple[str, ...]) -> list[str]:
        info = self.info
        prefix = parts[:-1]
        if not prefix:
            names = [
                "input",
                "payload",
                "payload_len",
                "cursor",
                "header",
                "v",
                "true",
                "false",
                *FUNCTIONS,
            ]
            if self.ctx.temp:
                names.append("temp")
            if self.ctx.perm:
                names.append("perm")
            if self.ctx.seq:
                names += _needing("seq")
            if self.ctx.direction and info.bidirectional:
                names += _needing("direction")
            if self.ctx.psm and info.states:
                names += [*_needing("psm"), *info.states]
            if self.ctx.fired:
                names += ["psm", "event"]
            if info.model.options:
                names.append("option")
            if self.ctx.foreign:
                names += list(self.params)
            return names
        if prefix[0] == "v":
            prefix = prefix[1:]
            if not prefix:
                return ["header", "temp"]
        if len(prefix) == 1:
            ns = prefix[0]
            table: dict[str, object] | list[str] = {
                "header": info.fields,
                "temp": info.temps,
                "perm": info.perms,
                "psm": info.transitions,
                "event": info.all_events(),
                "layout": info.layouts,
                "option": info.model.options,
            }.get(ns, [])
            if ns in self.params:
                return ["header", "perm", "temp"]
            return list(table)
        if len(prefix) == 2 and prefix[0] in self.params:
            other = self.params[prefix[0]]
            return list(
                {"header": other.fields, "perm": other.perms, "temp": other.temps}.get(
                    prefix[1], []
                )
            )
        return []


def _needing(flag: str) -> list[str]:
    """The built-in values a context flag opens, in the table's order."""
    return [n for n, v in BUILTIN_VALUE_TABLE.items() if v.needs == flag]
