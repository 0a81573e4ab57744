"""A capture written into a FIFO a record at a time, on a thread (paced input for tests that
change a running binary mid-capture: rules reload, NF attach/detach).

`PacedFeed(fifo, pcap, slow)` splits the pcap file into its header and records; `start()` opens
the FIFO (which blocks until the binary opens it for reading) and writes the header, then each
record followed by a pause: `slow(i)` seconds after record i (the tests slow down while a
control request is in flight, so the capture outlasts it).  `written` counts the records out,
`wait_written(n)` waits for n of them."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path


def pcap_records(pcap: Path) -> tuple[bytes, list[bytes]]:
    """A classic pcap file's 24-byte header and its records (16-byte record header + data)."""
    data = pcap.read_bytes()
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    out, off = [], 24
    while off + 16 <= len(data):
        caplen = struct.unpack(endian + "I", data[off + 8 : off + 12])[0]
        out.append(data[off : off + 16 + caplen])
        off += 16 + caplen
    return data[:24], out


class PacedFeed:
    def __init__(self, fifo: Path, pcap: Path, slow: Callable[[int], float]) -> None:
        self.fifo = fifo
        self.head, self.records = pcap_records(pcap)
        self.slow = slow
        self.written = 0
        self.thread = threading.Thread(target=self._write, daemon=True)  # blocked if the run died

    def _write(self) -> None:
        with open(self.fifo, "wb", buffering=0) as f:
            f.write(self.head)
            for i, r in enumerate(self.records):
                f.write(r)
                self.written += 1
                time.sleep(self.slow(i))

    def start(self) -> PacedFeed:
        self.thread.start()
        return self

    def wait_written(self, n: int, alive: Callable[[], bool] = lambda: True) -> None:
        """Until n records are out; `alive()` false (the binary died) fails the test."""
        while self.written < n:
            assert alive(), "the binary ended before reading the capture"
            time.sleep(0.01)

    def join(self, timeout: float = 120) -> None:
        self.thread.join(timeout)


PAUSE = 0.002  # seconds between records
