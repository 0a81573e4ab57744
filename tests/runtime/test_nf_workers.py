"""NFs and chains on every worker (--workers N): each worker runs its own chain, and the
workers write the files one context writes (line records into one shared file as they go).

For captures of the tshark comparison, with `--nf streams`, `--nf events`, `--nf flowstats`
and a chain of three NFs (streams, flowstats and the sample out-of-tree NF
examples/nf/flowbytes_nf.c, compiled here):

- `--workers 1`, `--workers 2` and one context write the same files and the same sets of
  records (packet numbers included), uids renamed by what they stand for
  (tests/support/records.py): worker K of N numbers its instances (i - 1) * N + K + 1, so
  uids are unique across the workers when written;
- each flow's "worker" is the one a symmetric-RSS NIC would give its addresses (the Toeplitz
  hash written in test_multicore.py from Microsoft's specification), and both workers had some;
- the streams equal tshark's (`follow`) for every TCP direction tshark reassembled whole.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from support.multicore import SYMMETRIC_KEY, _eal_workers, toeplitz
from support.oracle.tshark import REPO, TRACES, reference_streams, tshark_available
from support.records import canonical_outputs
from support.sources import _records, read_pcap

CAPTURES = [
    "mixed-android-mobile.pcap",
    "ipv4-frag-socks5-http.pcap",
    "http-ooo-lost-rst-tlpw1.pcap",
    "ipv6-http-gquic.pcap",
    "quic-v1-chromium.pcap",
]


@pytest.fixture(scope="module")
def flowbytes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    so = tmp_path_factory.mktemp("nf") / "flowbytes.so"
    src = REPO / "examples" / "nf" / "flowbytes_nf.c"
    cmd = ["cc", "-shared", "-fPIC", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"]
    subprocess.run(
        [*cmd, f"-I{REPO / 'runtime-c' / 'include'}", str(src), "-o", str(so)], check=True
    )
    return so


def _run(binary: Path, capture: Path, out: Path, nf: list[str], workers: int | None) -> str:
    cmd = [str(binary), str(capture), *nf, "--out", str(out)]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _chain(tmp: Path, flowbytes: Path) -> Path:
    chain = tmp / "chain.yaml"
    chain.write_text(
        "chain:\n"
        "  - nf: streams\n"
        "  - nf: flowstats\n"
        "    params: {all: true}\n"
        f"  - nf: {flowbytes}\n"
    )
    return chain


def _worker_of(src: str, dst: str, n: int) -> int:
    import ipaddress

    data = ipaddress.ip_address(src).packed + ipaddress.ip_address(dst).packed
    return (toeplitz(SYMMETRIC_KEY, data) & 127) % n


@pytest.mark.parametrize("name", CAPTURES)
def test_workers_write_what_one_context_writes(
    stack_bin: Path,  # noqa: F811
    flowbytes: Path,
    tmp_path: Path,
    name: str,
) -> None:
    capture = TRACES / name
    setups = {
        "streams": ["--nf", "streams"],
        "events": ["--nf", "events"],
        "flowstats": ["--nf", "flowstats"],
        "chain": ["--chain", str(_chain(tmp_path, flowbytes))],
    }
    workers_seen: set[int] = set()
    for label, nf in setups.items():
        one = _run(stack_bin, capture, tmp_path / f"{label}-plain", nf, None)
        runs = {w: tmp_path / f"{label}-w{w}" for w in (1, 2)}
        summaries = {w: _run(stack_bin, capture, out, nf, w) for w, out in runs.items()}
        w1, w2 = canonical_outputs(runs[1]), canonical_outputs(runs[2])
        assert w1, label
        assert w1 == w2, f"{label}: --workers 1 and 2 differ"
        # no worker part left behind; the records are the single-threaded run's
        assert not list(runs[2].glob(".rg-worker-*"))
        assert w2 == canonical_outputs(tmp_path / f"{label}-plain"), label
        # the summary: one context's, plus the frames per worker
        m = re.search(r"^workers +2 +\(frames per worker: (\d+) (\d+)\)", summaries[2], re.M)
        assert m, summaries[2]
        assert re.search(r"^packets +(\d+)", one, re.M)[1] == str(int(m[1]) + int(m[2]))  # type: ignore[index]
        # each flow record names the worker its addresses hash to
        for rec_file in ("flows.jsonl", "flowstats.jsonl"):
            path = runs[2] / rec_file
            if not path.is_file():
                continue
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                if rec.get("src") and rec.get("dst"):
                    assert rec["worker"] == _worker_of(rec["src"], rec["dst"], 2), rec
                workers_seen.add(rec["worker"])
                # the worker's uids: (i - 1) * 2 + worker + 1
                assert (rec["uid"] - 1) % 2 == rec["worker"], rec
    if name in ("mixed-android-mobile.pcap", "ipv6-http-gquic.pcap"):
        assert workers_seen == {0, 1}


@pytest.mark.parametrize("name", ["mixed-android-mobile.pcap", "ipv4-frag-socks5-http.pcap"])
def test_workers_burst_stage1_changes_nothing(
    stack_bin: Path,  # noqa: F811
    tmp_path: Path,
    name: str,
) -> None:
    """Each worker runs burst stage 1 over the frames it takes from its ring (--prefetch-always:
    on these small tables too; bursts of 7 and 256, so bursts end mid-connection and ring
    records of clock ticks fall inside them): the files are those of one context without it."""
    capture = TRACES / name
    for label, nf in {"streams": ["--nf", "streams"], "flowstats": ["--nf", "flowstats"]}.items():
        _run(stack_bin, capture, tmp_path / f"{label}-plain", [*nf, "--burst", "1"], None)
        plain = canonical_outputs(tmp_path / f"{label}-plain")
        assert plain, label
        for w, burst in ((1, 7), (2, 7), (2, 256)):
            out = tmp_path / f"{label}-w{w}-b{burst}"
            extra = ["--burst", str(burst), "--prefetch-always"]
            _run(stack_bin, capture, out, [*nf, *extra], w)
            assert canonical_outputs(out) == plain, f"{label} --workers {w} {extra}"


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
@pytest.mark.parametrize("name", ["mixed-android-mobile.pcap", "ipv4-frag-socks5-http.pcap"])
def test_worker_streams_equal_tshark(stack_bin: Path, tmp_path: Path, name: str) -> None:  # noqa: F811
    capture = TRACES / name
    out = tmp_path / "w2"
    _run(stack_bin, capture, out, ["--nf", "streams"], 2)
    ours = {}
    for line in (out / "flows.jsonl").read_text().splitlines():
        r = json.loads(line)
        ours[(r["proto"], r["src"], r["sport"], r["dst"], r["dport"])] = r
    checked = 0
    for s in reference_streams(capture):
        for d in s.directions:
            if d.flow.proto != "tcp" or not d.flow.bytes or d.gaps or not d.flow.handshake:
                continue
            rec = ours[d.flow.key]
            assert (rec["bytes"], rec["sha256"]) == (d.flow.bytes, d.flow.sha256), d.flow.key
            assert (out / rec["file"]).read_bytes() == d.data
            checked += 1
    # the directions tshark reassembled whole (41 and 2 today)
    assert checked >= {"mixed-android-mobile.pcap": 40, "ipv4-frag-socks5-http.pcap": 2}[name]


def test_summary_counts_per_worker(stack_bin: Path, tmp_path: Path) -> None:  # noqa: F811
    capture = TRACES / "mixed-android-mobile.pcap"
    nf = ["--nf", "flowstats", "--flowstats-all", "--summary", "json"]
    one = json.loads(_run(stack_bin, capture, tmp_path / "one", nf, None).splitlines()[-1])
    two = json.loads(_run(stack_bin, capture, tmp_path / "two", nf, 2).splitlines()[-1])
    assert sum(two["workers"]) == one["packets"]
    assert sum(two["worker_flows"]) == one["flows_opened"] == two["flows_opened"]
    # each worker's instances: its flowstats records (one per instance with --flowstats-all)
    recs = [
        json.loads(x) for x in (tmp_path / "two" / "flowstats.jsonl").read_text().split("\n")[:-1]
    ]
    assert [sum(r["worker"] == k for r in recs) for k in (0, 1)] == two["worker_flows"]
    assert all(n > 0 for n in two["worker_flows"])


def test_dpdk_workers_run_the_chain(
    dpdk: Path,  # noqa: F811
    stack_bin: Path,  # noqa: F811
    flowbytes: Path,
    tmp_path: Path,
) -> None:
    """DPDK's queues (a pcap vdev, the software distributor): every worker lcore runs the chain;
    the merged records are the file run's (uids aside: DPDK frames are not numbered)."""
    capture = TRACES / "mixed-android-mobile.pcap"
    chain = ["--chain", str(_chain(tmp_path, flowbytes))]
    _run(stack_bin, capture, tmp_path / "file", [*chain, "--no-timeouts"], None)
    n = len(read_pcap(capture))
    cmd = [str(stack_bin), "--io", "dpdk", "--count", str(n), "--duration", "60", *chain]
    cmd += ["--workers", "2", "--out", str(tmp_path / "dpdk"), "--no-timeouts", "--"]
    cmd += _eal_workers(tmp_path, 2, f"net_pcap0,rx_pcap={capture}")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = _records(tmp_path / "dpdk", "flows.jsonl")
    assert got and got == _records(tmp_path / "file", "flows.jsonl")
    # flowstats: the same records but for uids and times (DPDK dates frames when it reads them)
    fs = [
        sorted(
            re.sub(r'"(uid|first_ts|last_ts)":\d+,|,"worker":\d+', "", x)
            for x in (d / "flowstats.jsonl").read_text().splitlines()
        )
        for d in (tmp_path / "dpdk", tmp_path / "file")
    ]
    assert fs[0] and fs[0] == fs[1]
    # flowbytes.jsonl: the sample NF's counts per flow, uids aside
    fb = [
        sorted(
            re.sub(r'"uid":\d+,|,"worker":\d+', "", x)
            for x in (d / "flowbytes.jsonl").read_text().splitlines()
        )
        for d in (tmp_path / "dpdk", tmp_path / "file")
    ]
    assert fb[0] and fb[0] == fb[1]
