"""The front-end: loading spec files, composing stacks, the workspace that checks them, diagnostics and the JSON Schema."""
