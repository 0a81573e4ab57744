"""Atheris (libFuzzer for Python) harness for the spec front-end: YAML in, diagnostics out.

    python ci/fuzz_specs.py [libFuzzer options] [CORPUS_DIR ...]

One input is the text of a document, written as a protocol (or, when it has a `layers` key, a
stack beside copies of the stock protocols so that its references resolve) and validated with
`rubikgen validate --format json`. The rules of tests/front/test_fuzz_specs.py hold for every input:
exit status 0 or 1 (3 is an internal error), no traceback, every diagnostic with a line and a
column; anything else raises, and atheris reports the input. Seeds: the stock specs (pass
specs/protocols specs/stacks as corpus directories, as ci/fuzz-smoke.sh does).
"""

from __future__ import annotations

import io
import json
import shutil
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import atheris

with atheris.instrument_imports():
    import yaml  # noqa: F401  (instrumented: the loader is part of the front-end)

    from rubikgen.cli import main as rubikgen_main

REPO = Path(__file__).resolve().parents[1]
WORK = Path(tempfile.mkdtemp(prefix="rg-fuzz-specs-"))
shutil.copytree(REPO / "specs" / "protocols", WORK / "protocols")
(WORK / "stacks").mkdir()


def one_input(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    stack = "\nlayers:" in text or text.startswith("layers:")
    path = WORK / ("stacks/fuzz.yaml" if stack else "fuzz_protocol.yaml")
    path.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = rubikgen_main(["validate", "--format", "json", str(path)])
    if code not in (0, 1) or "Traceback" in err.getvalue():
        raise RuntimeError(f"validate exited {code}: {err.getvalue()[-2000:]}")
    for d in json.loads(out.getvalue() or "[]"):
        if not (d.get("line", 0) >= 1 and d.get("col", 0) >= 1):
            raise RuntimeError(f"diagnostic without a position: {d}")


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    try:
        atheris.Fuzz()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
