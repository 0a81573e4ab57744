"""C back-end: translation of checked specs to C (docs/spec-language.md, runtime-c/)."""
