"""Rules files: match/action rules compiled into a stack (docs/rules.md)."""
