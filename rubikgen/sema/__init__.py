"""Semantic checks: symbol tables, name resolution, protocol and stack checks."""
