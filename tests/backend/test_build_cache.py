"""The content-addressed build cache (RG_BUILD_CACHE, rubikgen/toolchain/build.py): a stack
built into a second directory with the same sources and flags is taken from the cache, not
compiled, and behaves as a fresh compile does (same `--nf streams` output and summary on a real
capture); a change to any input (here an -O level, and the handlers' bytes) misses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO_ROOT
from support.oracle import TRACES

from rubikgen.toolchain.build import build

STACK = REPO_ROOT / "specs" / "stacks" / "tcp_ip.yaml"
CAPTURE = TRACES / "mixed-android-mobile.pcap"


def _streams(binary: Path, out: Path) -> tuple[dict[str, bytes], str]:
    r = subprocess.run(
        [str(binary), str(CAPTURE), "--nf", "streams", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert files, "the streams NF wrote nothing"
    return files, r.stderr


def test_a_second_directory_reuses_the_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    monkeypatch.setenv("RG_BUILD_CACHE", str(tmp_path / "cache"))
    first = build(STACK, tmp_path / "a", opt_level=1, quiet=True)
    assert first.rebuilt and not first.from_cache  # an empty cache: compiled
    again = build(STACK, tmp_path / "b", opt_level=1, quiet=True)
    assert again.from_cache  # same sources and flags elsewhere: from the cache
    assert again.binary.read_bytes() == first.binary.read_bytes()
    assert os.access(again.binary, os.X_OK)
    # ... and up to date afterwards by the usual stamp
    assert not build(STACK, tmp_path / "b", opt_level=1, quiet=True).rebuilt

    other = build(STACK, tmp_path / "c", opt_level=0, quiet=True)
    assert not other.from_cache  # another flag: another key

    handlers = tmp_path / "d" / "tcp_ip_handlers.c"
    handlers.parent.mkdir()
    handlers.write_text((tmp_path / "a" / "tcp_ip_handlers.c").read_text() + "\n/* changed */\n")
    assert not build(STACK, tmp_path / "d", opt_level=1, quiet=True).from_cache  # other bytes

    monkeypatch.delenv("RG_BUILD_CACHE")
    fresh = build(STACK, tmp_path / "e", opt_level=1, quiet=True)
    assert fresh.rebuilt and not fresh.from_cache
    mine, mine_summary = _streams(again.binary, tmp_path / "out-cached")
    ref, ref_summary = _streams(fresh.binary, tmp_path / "out-fresh")
    assert mine == ref
    assert mine_summary.replace(str(again.binary), "") == ref_summary.replace(str(fresh.binary), "")


_BUILD_ONE = """
import json, sys
from rubikgen.toolchain.build import build
r = build(sys.argv[1], sys.argv[2], opt_level=0, quiet=True)
print(json.dumps({"rebuilt": r.rebuilt, "from_cache": r.from_cache}))
"""


def test_builds_side_by_side_compile_once(tmp_path: Path) -> None:
    """Two processes building the same binary into two directories at once (two xdist workers
    wanting one stack): one compiles, the other waits for it and takes the cache's copy."""
    env = dict(os.environ, RG_BUILD_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(REPO_ROOT))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _BUILD_ONE, str(STACK), str(tmp_path / d)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
        for d in ("x", "y")
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert sorted(r["from_cache"] for r in results) == [False, True], results
    assert all(r["rebuilt"] for r in results)
    assert (tmp_path / "x" / "tcp_ip").read_bytes() == (tmp_path / "y" / "tcp_ip").read_bytes()
