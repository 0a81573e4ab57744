"""Live counters and the flow table of a running binary (issue 30): `rubikgen ctl SOCK stats`,
`--stats-interval`, `--metrics` and `rubikgen ctl SOCK flows`.

A `--workers 2` run reads a capture written into a FIFO a record at a time; the writer holds
at known records (a checkpoint), so the test asks a binary whose input stands still:

- stats: at each checkpoint the counters have grown and none went down (ctl answers and
  every stats.jsonl line); the JSON, `ctl stats --format prometheus` and `GET /metrics`
  (parsed by prometheus_client's own parser) give the same numbers; the answer at the end of
  the input equals the final summary in what the final flush does not change, and the last
  stats.jsonl line equals the summary;
- flows: held after K packets, the open TCP instances ctl flows lists are tshark's
  `-z conv,tcp` conversations of those K packets, with the frames each side sent; every
  conversation it does not list had closed by then (its flowstats record says so).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.captures import REPO
from support.conversations import reference
from support.oracle import TRACES
from support.oracle.tshark import tshark_available
from support.paced_feed import PAUSE, PacedFeed, pcap_records

pytestmark = pytest.mark.serial  # paced input

CAPTURE = TRACES / "mixed-android-mobile.pcap"


def _ctl(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rubikgen", "ctl", str(sock), *args]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=False)


def _stats(sock: Path) -> dict[str, Any]:
    r = _ctl(sock, "stats")
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Held:
    """A paced feed that stops after each checkpoint's record until released."""

    def __init__(self, fifo: Path, checkpoints: list[int]) -> None:
        self.go = {k: threading.Event() for k in checkpoints}
        self.feed = PacedFeed(fifo, CAPTURE, self._pause)

    def _pause(self, i: int) -> float:
        ev = self.go.get(i + 1)
        if ev is not None:
            ev.wait(120)
        return PAUSE

    def release(self, k: int) -> None:
        self.go[k].set()


def _counters(node: Any, path: str = "") -> Iterator[tuple[str, int]]:
    """The counters of a stats object: every number but the gauges (live, lingering) and the
    time."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k not in ("live", "lingering", "time"):
                yield from _counters(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _counters(v, f"{path}[{i}]")
    elif isinstance(node, int) and not isinstance(node, bool):
        yield path, node


def _never_down(snaps: list[dict[str, Any]]) -> None:
    for a, b in zip(snaps, snaps[1:], strict=False):
        before = dict(_counters({"total": a["total"], "workers": a["workers"]}))
        for k, v in _counters({"total": b["total"], "workers": b["workers"]}):
            assert v >= before[k], f"{k} went down: {before[k]} -> {v}"


def _wait_packets(sock: Path, n: int, proc: subprocess.Popen[str]) -> dict[str, Any]:
    """ctl stats once the workers have every one of the n frames written (the reader hands
    them over asynchronously)."""
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        s = _stats(sock)
        if s["total"]["packets"] >= n or time.monotonic() > deadline:
            assert s["total"]["packets"] == n
            return s
        time.sleep(0.05)


def _prom_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        assert fam.name.startswith("rubikgen_")
        assert fam.type in ("counter", "gauge"), fam
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _prom_matches_json(samples: dict[Any, float], snap: dict[str, Any]) -> None:
    """The exposition's values are the JSON's, worker by worker."""
    scalars = {
        "rubikgen_packets_total": "packets",
        "rubikgen_bytes_total": "bytes",
        "rubikgen_instances_opened_total": "flows_opened",
        "rubikgen_instances_closed_total": "flows_closed",
        "rubikgen_handler_calls_total": "calls",
        "rubikgen_payload_bytes_total": "payload_bytes",
        "rubikgen_errors_total": "errors",
        "rubikgen_skipped_total": "skipped",
        "rubikgen_gaps_total": "gaps",
        "rubikgen_gap_bytes_total": "gap_bytes",
        "rubikgen_instances_live": "live",
    }
    for w in snap["workers"]:
        lw = (("worker", str(w["worker"])),)
        for metric, key in scalars.items():
            assert samples[(metric, lw)] == w[key], (metric, w["worker"])
        for layer, y in w["layers"].items():
            ll = (("layer", layer), ("worker", str(w["worker"])))
            assert samples[("rubikgen_layer_opened_total", ll)] == y["opened"]
            assert samples[("rubikgen_layer_live", ll)] == y["live"]
            assert samples[("rubikgen_memcap_hits_total", ll)] == y["memory"]["cap_hits"]
            for reason, n in y["closed"].items():
                key = (("layer", layer), ("reason", reason), ("worker", str(w["worker"])))
                assert samples[("rubikgen_layer_closed_total", key)] == n
    total = snap["total"]
    assert (
        sum(v for (m, _), v in samples.items() if m == "rubikgen_packets_total")
        == (total["packets"])
    )
    jumps = total["clock_jumps"]
    assert samples[("rubikgen_clock_jumps_total", (("direction", "forward"),))] == jumps["forward"]


def test_stats_while_running(binary: Path, tmp_path: Path) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    _, records = pcap_records(CAPTURE)
    n = len(records)
    checkpoints = [n // 5, n // 2, n]
    fifo, sock, out = tmp_path / "in.pcap", tmp_path / "ctl.sock", tmp_path / "out"
    os.mkfifo(fifo)
    port = _free_port()
    argv = [str(binary), str(fifo), "--workers", "2", "--control", str(sock), "--nf", "flowstats"]
    argv += ["--out", str(out), "--summary", "json", "--stats-interval", "0.2"]
    argv += ["--metrics", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    held = Held(fifo, checkpoints)
    held.feed.start()
    snaps = []
    try:
        for k in checkpoints:
            held.feed.wait_written(k, lambda: proc.poll() is None)
            s = _wait_packets(sock, k, proc)
            snaps.append(s)
            # the input stands still: the three forms give the same numbers
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                samples = _prom_samples(r.read().decode())
            _prom_matches_json(samples, s)
            r2 = _ctl(sock, "stats", "--format", "prometheus")
            assert r2.returncode == 0, r2.stderr
            assert _prom_samples(r2.stdout) == samples
            assert _stats(sock)["total"] == s["total"]
            if k == checkpoints[0]:  # what else the responder answers
                with pytest.raises(urllib.error.HTTPError) as e:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
                assert e.value.code == 404
                bad = _ctl(sock, "stats", "--format", "xml")
                assert bad.returncode != 0
            held.release(k)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        for k in checkpoints:
            held.release(k)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    summary = json.loads(stdout.strip().splitlines()[-1])
    # the counters grew between the checkpoints, and none went down
    assert [s["total"]["packets"] for s in snaps] == checkpoints
    assert snaps[0]["total"]["flows_opened"] < snaps[-1]["total"]["flows_opened"]
    assert {w["worker"] for w in snaps[-1]["workers"]} == {0, 1}
    for s in snaps:
        assert sum(w["packets"] for w in s["workers"]) == s["total"]["packets"]
    _never_down(snaps)
    # the answer at the end of the input: the summary, but for what the final flush closes
    last = snaps[-1]["total"]
    for key in ("packets", "bytes", "flows_opened", "skipped", "errors", "gaps", "payload_bytes"):
        assert last[key] == summary[key], key
    assert summary["workers"] == [w["packets"] for w in snaps[-1]["workers"]]
    for name, y in last["layers"].items():
        assert y["opened"] == summary["layers"][name]["opened"], name
    # the flush closes the live instances and ends the lingering ones
    assert last["flows_closed"] + last["live"] + last["lingering"] == summary["flows_closed"]
    # stats.jsonl: whole lines, never down, the last one the summary's counters
    lines = (out / "stats.jsonl").read_text().splitlines()
    assert len(lines) >= 3
    jsonl = [json.loads(line) for line in lines]
    _never_down(jsonl)
    final = jsonl[-1]
    assert final["final"] is True and not any(s["final"] for s in jsonl[:-1])
    for key, v in final["total"].items():
        if key in summary and key != "layers":
            assert v == summary[key], key
    assert final["total"]["live"] == 0
    for name, y in final["total"]["layers"].items():
        ref = summary["layers"][name]
        for key in ("opened", "closed", "one_packet", "flows", "dropped_by_verdict", "bypassed"):
            assert y[key] == ref[key], (name, key)
        for key in ("cap_hits", "evicted", "dropped_packets", "seq_limit_hits"):
            assert y["memory"][key] == ref["memory"][key], (name, key)


def _flows(sock: Path, *args: str) -> list[dict[str, Any]]:
    r = _ctl(sock, "flows", *args)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


@pytest.mark.skipif(not tshark_available(), reason="tshark is not installed")
def test_flows_are_tsharks_open_conversations(binary: Path, tmp_path: Path) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"{CAPTURE.name} is not in {TRACES}")
    head, records = pcap_records(CAPTURE)
    k = len(records) // 2
    first_k = tmp_path / "first.pcap"
    first_k.write_bytes(head + b"".join(records[:k]))
    ref = reference(first_k)
    ts_k = ref.pkts[-1].ts if ref.pkts else 0
    convs = {key: c for key, c in ref.convs.items() if key[0] == "tcp"}
    assert len(convs) >= 5

    fifo, sock, out = tmp_path / "in.pcap", tmp_path / "ctl.sock", tmp_path / "out"
    os.mkfifo(fifo)
    # no idle expiry: an instance ends by its PSM only, at a packet it saw
    argv = [str(binary), str(fifo), "--workers", "2", "--control", str(sock), "--nf", "flowstats"]
    argv += ["--no-timeouts", "--flowstats-all", "--out", str(out), "--summary", "json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    held = Held(fifo, [k])
    held.feed.start()
    try:
        held.feed.wait_written(k, lambda: proc.poll() is None)
        _wait_packets(sock, k, proc)
        flows = _flows(sock, "--layer", "tcp")
        every = _flows(sock)
        filtered = _flows(sock, "--filter", "tcp.port == 443 and packets >= 2")
        limited = _flows(sock, "--limit", "3")
        bad = _ctl(sock, "flows", "--filter", "tcp.dport === 443")
        bad_layer = _ctl(sock, "flows", "--layer", "nosuch")
        held.release(k)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        held.release(k)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert bad.returncode == 1 and "--filter: at column" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr
    assert bad_layer.returncode == 1 and "no such layer" in bad_layer.stderr

    # every listed flow is a conversation of the first k packets; every other conversation had
    # ended by then, by its PSM (flowstats: closed at its last packet, before packet k); the
    # frames each side sent are those of the conversation's instances (a 4-tuple reused after
    # a close is one conversation to tshark)
    assert flows and {f["worker"] for f in every} == {0, 1}
    records_out = [json.loads(x) for x in (out / "flowstats.jsonl").read_text().splitlines()]
    seen = {(f["src"], f["sport"], f["dst"], f["dport"], f["first_ts"]) for f in flows}
    ended = [
        r for r in records_out
        if r["layer"] == "tcp" and r["close"] == "accept" and r["last_ts"] <= ts_k
        and (r["src"], r["sport"], r["dst"], r["dport"], r["first_ts"]) not in seen
    ]  # fmt: skip
    sent: dict[tuple[str, frozenset[tuple[str, int]]], dict[tuple[str, int], int]] = {}
    for r in [*flows, *ended]:
        a, b = (r["src"], r["sport"]), (r["dst"], r["dport"])
        key = ("tcp", frozenset([a, b]))
        assert key in convs, r
        n = sent.setdefault(key, {a: 0, b: 0})
        n[a] += r["packets"][0]
        n[b] += r["packets"][1]
    for f in flows:
        assert f["state"] and f["verdict"] == "pass", f
        assert f["first_ts"] <= f["last_ts"] <= ts_k and f["age_s"] >= 0
    assert set(sent) == set(convs)
    for key, conv in convs.items():
        assert sent[key] == conv.frames, key
    # the filter and the limit
    assert filtered == [
        f for f in every
        if f["proto"] == "tcp" and 443 in (f["sport"], f["dport"])
        and sum(f["packets"]) >= 2
    ]  # fmt: skip
    assert filtered
    assert len(limited) == 3 and all(f in every for f in limited)
