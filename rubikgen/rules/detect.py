"""Which files are rules files (docs/rules.md), without importing the checker: `rubikgen
validate` asks this of every YAML/TOML file it is given."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def is_rules_document(data: Any) -> bool:
    """A mapping with a top-level `rules` key and no `protocol`/`stack` key."""
    return isinstance(data, dict) and "rules" in data and not ({"protocol", "stack"} & set(data))


def looks_like_rules(path: str) -> bool:
    """A YAML/TOML file whose document is a rules document."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if "rules" not in text:
        return False
    from rubikgen.source import load_text

    return is_rules_document(load_text(path, text).data)
