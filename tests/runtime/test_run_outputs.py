"""No surprising writes (issue 26): what `rubikgen run` writes, and that it says so.

- the default NF writes flow records, not payload: one flowstats record per conversation of
  tshark's `-z conv,tcp` / `-z conv,udp` tables, and no streams/ folder; `--nf streams` (on
  request) writes the payload;
- the summary names every file the run wrote (`wrote` in text, `files_written` in JSON): the
  set named equals the files found in the output folder afterwards;
- an NF built as a shared object (the README's `--nf ./flowbytes_nf.so`) gets its output folder
  created on a fresh checkout, for `--out` and for an `out` parameter in a chain file (the path
  `rubikgen ctl attach out=DIR` takes too); before, the run stopped with "cannot create
  out/.../flowbytes.jsonl".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import REPO_ROOT
from support.oracle import tshark_available
from support.oracle.tshark import conversations
from support.trusted import trusted_dir

REPO = REPO_ROOT
STACK = "specs/stacks/tcp_ip.yaml"
CAPTURE = REPO / "captures" / "raw-ipv4-ipv6-http.pcap"


def _run(tmp: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "rubikgen", "run", STACK, str(CAPTURE)]
    argv += ["--build-dir", str(tmp / "build"), *map(str, args)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def _files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file()}


def _named(summary: dict[str, Any]) -> tuple[set[str], int]:
    """The files `files_written` names (a folder entry stands for its files) and their count."""
    paths = {e["path"] for e in summary["files_written"]}
    return paths, sum(e["files"] for e in summary["files_written"])


@pytest.fixture(scope="module")
def build_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("run-outputs")


def test_the_default_nf_writes_records_and_the_summary_names_them(
    build_tmp: Path, tmp_path: Path
) -> None:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    out = tmp_path / "default"
    summary = json.loads(_run(build_tmp, "--out", out, "--summary", "json").stdout)
    assert summary["nf"] == "flowstats"
    assert _files(out) == {str(out / "flowstats.jsonl")}  # no payload
    records = [json.loads(x) for x in (out / "flowstats.jsonl").read_text().splitlines()]
    convs = conversations(CAPTURE)
    assert len(convs) > 0
    got = sorted(
        (r["proto"], *sorted([(r["src"], r["sport"]), (r["dst"], r["dport"])]))
        for r in records
        if r.get("sport") is not None
    )
    want = sorted((p, *sorted([a, b])) for p, a, b in convs)
    assert got == want
    assert _named(summary) == ({str(out / "flowstats.jsonl")}, 1)
    # the short text says the same
    text = _run(build_tmp, "--out", tmp_path / "text").stdout
    assert f"wrote          {tmp_path / 'text' / 'flowstats.jsonl'}  (" in text, text


def test_streams_on_request_and_every_file_named(build_tmp: Path, tmp_path: Path) -> None:
    out = tmp_path / "streams"
    summary = json.loads(
        _run(build_tmp, "--nf", "streams", "--out", out, "--summary", "json").stdout
    )
    files = _files(out)
    bins = {f for f in files if f.endswith(".bin")}
    assert bins and summary["payload_bytes"] == sum(Path(f).stat().st_size for f in bins)
    paths, count = _named(summary)
    assert count == len(files)
    assert paths == {str(out / "flows.jsonl"), str(out / "streams.json"), f"{out / 'streams'}/"}
    text = _run(build_tmp, "--nf", "streams", "--out", tmp_path / "t").stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("wrote "))
    assert f"{tmp_path / 't' / 'streams'}/ ({len(bins)} files)" in line, text
    # a rerun into the same folder names what it rewrote, not what is merely there
    (out / "left-over.txt").write_text("from before\n")
    os.utime(out / "left-over.txt", (1, 1))
    again = json.loads(_run(build_tmp, "--nf", "streams", "--out", out, "--summary", "json").stdout)
    assert _named(again) == (paths, count)


def _flowbytes(tmp: Path) -> Path:
    so = tmp / "flowbytes_nf.so"
    cc = ["cc", "-shared", "-fPIC", "-std=c11", "-O2", f"-I{REPO / 'runtime-c' / 'include'}"]
    subprocess.run([*cc, str(REPO / "examples/nf/flowbytes_nf.c"), "-o", str(so)], check=True)
    return so


def test_a_shared_object_nf_gets_its_output_folder(build_tmp: Path, tmp_path: Path) -> None:
    so = _flowbytes(tmp_path)
    out = tmp_path / "fresh" / "out"  # neither exists: a fresh checkout
    summary = json.loads(_run(build_tmp, "--nf", str(so), "--out", out, "--summary", "json").stdout)
    lines = (out / "flowbytes.jsonl").read_text().splitlines()
    assert len(lines) == summary["flows_opened"]  # one record per instance closed
    assert _named(summary) == ({str(out / "flowbytes.jsonl")}, 1)
    # an `out` parameter of a chain file (the path `ctl attach out=DIR` takes)
    other = tmp_path / "elsewhere" / "deeper"
    chain = tmp_path / "chain.yaml"
    chain.write_text(f"chain:\n  - nf: {so}\n    params: {{out: {other}}}\n")
    summary = json.loads(
        _run(build_tmp, "--chain", chain, "--out", tmp_path / "o2", "--summary", "json").stdout
    )
    assert (other / "flowbytes.jsonl").read_text().splitlines() == lines
    assert str(other / "flowbytes.jsonl") in _named(summary)[0]


def test_ctl_attach_creates_the_out_folder(build_tmp: Path, tmp_path: Path) -> None:
    """`rubikgen ctl SOCK attach X.so out=DIR` on a running binary, DIR not there yet: the
    attach succeeds, the NF writes into DIR and the summary names its file."""
    with trusted_dir("run-outputs") as nfs:
        _attach_creates_the_out_folder(build_tmp, tmp_path, nfs)


def _attach_creates_the_out_folder(build_tmp: Path, tmp_path: Path, nfs: Path) -> None:
    from rubikgen.toolchain.build import build

    so = _flowbytes(nfs)
    binary = build(REPO / STACK, build_tmp / "build", quiet=True).binary  # the runs' build
    fifo, sock = tmp_path / "in.pcap", tmp_path / "ctl.sock"
    os.mkfifo(fifo)
    argv = [str(binary), str(fifo), "--control", str(sock), "--burst", "1", "--nf-path", str(nfs)]
    argv += ["--out", str(tmp_path / "o"), "--summary", "json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    data = CAPTURE.read_bytes()
    first = 24 + 16 + int.from_bytes(data[32:36], "little")  # header and first record
    with open(fifo, "wb") as w:
        w.write(data[:first])  # the binary opens its socket once it has read them
        w.flush()
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        assert sock.exists(), proc.communicate(timeout=60)
        out = tmp_path / "new" / "dir"
        ctl = [sys.executable, "-m", "rubikgen", "ctl", str(sock), "attach", str(so)]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        reply = subprocess.Popen(
            [*ctl, "--name", "fb", f"out={out}"], stdout=subprocess.PIPE, text=True, env=env
        )
        # the request applies between two packets: the rest goes slowly until it is done
        at = first
        while at < len(data):
            end = at + 16 + int.from_bytes(data[at + 8 : at + 12], "little")
            w.write(data[at:end])
            w.flush()
            at = end
            if reply.poll() is None:
                time.sleep(0.05)
    assert reply.wait(timeout=60) == 0, proc.communicate(timeout=60)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    lines = (out / "flowbytes.jsonl").read_text().splitlines()
    assert lines
    summary = json.loads(stdout)
    assert str(out / "flowbytes.jsonl") in _named(summary)[0]
