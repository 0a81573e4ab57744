"""JSON Schemas of the documents, generated from the pydantic models (never edited by hand)."""

from __future__ import annotations

import json
import os
from typing import Any

from pydantic import BaseModel

from rubikgen.front.chain import ChainFile
from rubikgen.models import Protocol, Stack
from rubikgen.rules.model import RulesFile
from rubikgen.spectest.model import TestFile

SCHEMAS: dict[str, type[BaseModel]] = {
    "protocol.schema.json": Protocol,
    "stack.schema.json": Stack,
    "spectest.schema.json": TestFile,
    "chain.schema.json": ChainFile,
    "rules.schema.json": RulesFile,
}


def schema_text(name: str) -> str:
    model = SCHEMAS[name]
    schema: dict[str, Any] = model.model_json_schema(by_alias=True, mode="validation")
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://rubikgen.invalid/schema/{name}",
        **schema,
    }
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def write_schemas(out: str, check: bool = False) -> list[str]:
    """Writes (or with check=True compares) the schemas; returns the stale files."""
    stale: list[str] = []
    if not check:
        os.makedirs(out, exist_ok=True)
    for name in SCHEMAS:
        path = os.path.join(out, name)
        text = schema_text(name)
        try:
            with open(path, encoding="utf-8") as f:
                current = f.read()
        except OSError:
            current = None
        if current != text:
            stale.append(path)
            if not check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
    return stale
