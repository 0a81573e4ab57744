"""Pydantic models of rubikgen documents."""

from rubikgen.models.protocol import Protocol
from rubikgen.models.stack import Stack

__all__ = ["Protocol", "Stack"]
