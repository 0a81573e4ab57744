"""`rubikgen ctl SOCKET stats|flows|trace`: a running binary's live counters, open flows and
packet traces (runtime-c/main/rg_live.h, rg_trace_ctl.c), over its control socket; and the
progress `rubikgen run` shows on a terminal, fed by the binary's --stats-fd lines."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
from typing import IO, Any


def add_parsers(what: argparse._SubParsersAction[Any]) -> None:
    """The `stats` and `flows` actions of `rubikgen ctl`."""
    s = what.add_parser(
        "stats", help="the summary's counters now, per worker and summed (docs/operating.md)"
    )
    s.add_argument(
        "--format",
        choices=("json", "prometheus"),
        default="json",
        help="one JSON object (default) or the Prometheus text exposition",
    )
    f = what.add_parser(
        "flows", help="the open instances: key, state, bytes and packets, age (JSON lines)"
    )
    f.add_argument("--layer", metavar="L", help="only the instances of layer L")
    f.add_argument(
        "--filter",
        metavar="EXPR",
        help="e.g. 'tcp.dport == 443 and state == ESTABLISHED' (docs/operating.md)",
    )
    f.add_argument("--limit", metavar="N", type=int, help="at most N flows")
    t = what.add_parser(
        "trace",
        help="what the stack does with the next N packets: layers, instances, PSM "
        "transitions, sequence, events, handlers, verdict (a build with --trace)",
    )
    t.add_argument("count", metavar="N", help="packets to trace (1 to 1000)")
    t.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="readable text (default) or one JSON object per packet",
    )
    t.add_argument(
        "--wait",
        metavar="S",
        type=int,
        default=10,
        help="seconds to wait for the N packets (default 10); those traced by then are shown",
    )


def command(args: argparse.Namespace) -> int:
    from rubikgen.cli.ctlsock import ask

    if args.action == "trace":
        return trace_command(args)
    if args.action == "stats":
        fields = ["stats", args.format]
    else:
        if args.limit is not None and args.limit < 1:
            sys.stderr.write("rubikgen: error: --limit: a number of flows, 1 or more\n")
            return 2
        limit = "" if args.limit is None else str(args.limit)
        fields = ["flows", args.layer or "", args.filter or "", limit]
    return ask(args.socket, fields, args.timeout)


def trace_command(args: argparse.Namespace) -> int:
    """`ctl SOCK trace N`: the binary checks N and the wait (rg_ctlsec.c rg_trace_args) and
    replies with a line of counts, then one JSON object per traced packet."""
    from rubikgen.cli.ctlsock import EXIT_ERRORS, EXIT_OK, reply

    fields = ["trace", str(args.count), str(args.wait)]
    # the reply comes when the packets were traced or the wait is over
    text = reply(args.socket, fields, max(args.timeout, args.wait + 5.0))
    if text is None:
        return EXIT_ERRORS
    head, *lines = [ln for ln in text.splitlines() if ln]
    info = json.loads(head)
    if info["traced"] < info["asked"]:
        sys.stderr.write(
            f"rubikgen: note: {info['traced']} of {info['asked']} packets traced within "
            f"{info['timeout_s']} s\n"
        )
    if args.format == "json":
        sys.stdout.write("".join(ln + "\n" for ln in lines))
    else:
        sys.stdout.write("".join(trace_text(json.loads(ln)) for ln in lines))
    return EXIT_OK


def _ts_text(ns: int) -> str:
    import datetime

    t = datetime.datetime.fromtimestamp(ns // 1_000_000_000, datetime.UTC)
    return f"{t:%Y-%m-%d %H:%M:%S}.{ns % 1_000_000_000 // 1000:06d} UTC"


def _step_text(s: dict[str, Any]) -> str:
    k = s["step"]
    if k == "parsed":
        return "header parsed" if s["ok"] else f"header not parsed: {s['error']}"
    if k == "instance":
        if s["action"] == "none":
            return "no instance"
        ends = ""
        if s.get("src") is not None:
            a = s["src"] if s.get("sport") is None else f"{s['src']}:{s['sport']}"
            b = s["dst"] if s.get("dport") is None else f"{s['dst']}:{s['dport']}"
            ends = f" {a} <-> {b}" if s.get("dst") is not None else f" {a}"
        return f"instance {s['action']} uid {s['uid']} dir {s['dir']}{ends}"
    if k == "psm":
        if s["transition"] is None:
            return f"psm {s['from']}: no transition matched (on_fail: {s['on_fail']})"
        return f"psm {s['from']} -> {s['to']} (transition {s['transition']}, {s['spec']})"
    if k == "sequence":
        return f"sequence dir {s['dir']} seq {s['seq']} len {s['length']}: {s['action']}"
    if k == "assemble":
        gaps = f", {s['gaps']} hole(s) skipped" if s["gaps"] else ""
        return f"assembled {s['bytes']} bytes{gaps}"
    if k == "event":
        return f"event {s['event']}"
    if k == "handler":
        return f"handler {s['handler']}"
    if k == "destroy":
        return "instance ends (accept state)"
    return str(s.get("note", k))


def trace_text(p: dict[str, Any]) -> str:
    """One traced packet as text, in the manner of VPP's `show trace`."""
    out = [
        f"Packet {p['trace']} (worker {p['worker']}, packet #{p['packet']}, "
        f"{_ts_text(p['ts_ns'])}, {p['caplen']} bytes, entry {p['entry']})"
    ]
    layer = None
    for s in p["steps"]:
        if s["step"] == "layer":
            at = "reassembled" if s["offset"] is None else f"@{s['offset']}"
            out.append(f"  {s['layer']:<10} {at:<12} {s['length']} bytes ({s['protocol']})")
            layer = s["layer"]
        else:  # a step of a layer below, after the layers above returned: its name again
            name = "" if s["layer"] == layer else f"({s['layer']})"
            out.append(f"  {name:<10} {_step_text(s)}")
    if p["nfs"]:
        out.append(f"  NFs: {', '.join(p['nfs'])}")
    tail = f"  {p['result']}, verdict {p['verdict']}"
    if p["lost_steps"]:
        tail += f" ({p['lost_steps']} steps not recorded: the record is full)"
    return "\n".join([*out, tail]) + "\n\n"


def _file_position(total: dict[str, Any], pcapng: bool) -> int:
    """Bytes of the capture file read after these counters: a classic pcap file's 24-byte
    header, then 16 bytes of record header and the captured bytes per frame (exact); pcapng:
    its Enhanced Packet Blocks' 32 bytes and padding per frame (an estimate: options and other
    blocks are not counted)."""
    if pcapng:
        return 28 + 34 * int(total["packets"]) + int(total["bytes"])
    return 24 + 16 * int(total["packets"]) + int(total["bytes"])


def start_progress(capture: str | None, quiet: bool, cmd: list[str]) -> Progress | None:
    """`rubikgen run` on a capture file with standard error on a terminal (and no --quiet):
    a pipe whose write end the binary gets as --stats-fd (appended to cmd), read by a
    progress bar; None otherwise (nothing is shown)."""
    if quiet or capture in (None, "-") or not sys.stderr.isatty():
        return None
    try:
        st = os.stat(capture)
    except OSError:
        return None
    import stat

    if not stat.S_ISREG(st.st_mode):  # a FIFO or a device: no size to measure against
        return None
    with open(capture, "rb") as f:
        pcapng = f.read(4) == b"\x0a\x0d\x0d\x0a"
    r, w = os.pipe()
    cmd += ["--stats-fd", str(w)]
    return Progress(r, w, st.st_size, os.path.basename(capture), pcapng)


class Progress:
    """A progress bar (tqdm) on stderr, fed by the binary's stats lines from fd (the read end
    of the pipe whose write end is the binary's --stats-fd), until the binary closes it."""

    def __init__(self, fd: int, wfd: int, size: int | None, name: str, pcapng: bool) -> None:
        self.stream: IO[bytes] = os.fdopen(fd, "rb", buffering=0)
        self.wfd = wfd  # the binary's --stats-fd: closed here once the binary has it
        self.size = size
        self.name = name
        self.pcapng = pcapng
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Progress:
        """After the binary started (it holds the write end)."""
        os.close(self.wfd)
        self.thread.start()
        return self

    def _run(self) -> None:
        from tqdm import tqdm

        bar = tqdm(
            total=self.size,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=self.name,
            file=sys.stderr,
            leave=False,
            # a terminal that reports no size (0 columns) gets $COLUMNS or 80, not a bar of 0
            ncols=shutil.get_terminal_size().columns,
        )
        done = 0
        buf = b""
        try:
            while True:
                chunk = self.stream.read(65536)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines[-1:]:  # the newest snapshot is all that shows
                    try:
                        total = json.loads(line)["total"]
                    except (ValueError, KeyError, TypeError):
                        continue
                    pos = _file_position(total, self.pcapng)
                    if self.size is not None:
                        pos = min(pos, self.size)
                    bar.update(pos - done)
                    done = pos
                    bar.set_postfix_str(f"{total['packets']} pkts, {total['flows']} flows")
        finally:
            bar.close()
            self.stream.close()

    def join(self) -> None:
        """Once the binary has ended (its end of the pipe is closed: the bar ends)."""
        self.thread.join(5)
