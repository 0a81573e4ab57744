"""`rubikgen ctl SOCKET stats|flows`: a running binary's live counters and open flows
(runtime-c/main/rg_live.h), over its control socket; and the progress `rubikgen run` shows
on a terminal, fed by the binary's --stats-fd lines."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import IO, Any

EXIT_OK, EXIT_ERRORS = 0, 1


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


def command(args: argparse.Namespace) -> int:
    from rubikgen.cli.chain import request

    if args.action == "stats":
        fields = ["stats", args.format]
    else:
        if args.limit is not None and args.limit < 1:
            sys.stderr.write("rubikgen: error: --limit: a number of flows, 1 or more\n")
            return 2
        limit = "" if args.limit is None else str(args.limit)
        fields = ["flows", args.layer or "", args.filter or "", limit]
    try:
        ok, text = request(args.socket, fields, args.timeout)
    except OSError as e:
        sys.stderr.write(f"rubikgen: error: {args.socket}: {e}\n")
        return EXIT_ERRORS
    if not ok:
        sys.stderr.write(f"rubikgen: error: {text}\n")
        return EXIT_ERRORS
    sys.stdout.write(text)
    return EXIT_OK


def _file_position(total: dict[str, Any]) -> int:
    """Bytes of a classic pcap file read after these counters: its 24-byte header, then
    16 bytes of record header and the captured bytes per frame (pcapng: an estimate)."""
    return 24 + 16 * int(total["packets"]) + int(total["bytes"])


class Progress:
    """A progress bar (tqdm) on stderr, fed by the binary's stats lines from fd (the read end
    of the pipe whose write end is the binary's --stats-fd), until the binary closes it."""

    def __init__(self, fd: int, size: int | None, name: str) -> None:
        self.stream: IO[bytes] = os.fdopen(fd, "rb", buffering=0)
        self.size = size
        self.name = name
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Progress:
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
            dynamic_ncols=True,
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
                    pos = _file_position(total)
                    if self.size is not None:
                        pos = min(pos, self.size)
                    bar.update(pos - done)
                    done = pos
                    bar.set_postfix_str(f"{total['packets']} pkts, {total['flows']} flows")
        finally:
            bar.close()
            self.stream.close()

    def join(self) -> None:
        self.thread.join(5)
