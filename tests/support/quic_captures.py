"""Shared by tests; moved from e2e/test_quic.py."""

from __future__ import annotations

import csv

from support import REPO_ROOT

SANITIZER = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "runtime error:")


TRACES = REPO_ROOT.parent / "shared" / "traces"


def quic_captures() -> list[str]:
    manifest = TRACES / "MANIFEST.tsv"
    if not manifest.is_file():
        return []
    with manifest.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))

    def features(notes: str) -> list[str]:
        tail = notes.split("features=", 1)[1] if "features=" in notes else ""
        return tail.split(";")[0].strip().split(",")

    # stacks_covered names gquic too (ipv6-http-gquic.pcap): it must not crash either
    return sorted(
        r["file"] for r in rows if "quic" in r["stacks_covered"] or "quic" in features(r["notes"])
    )


CAPTURES = quic_captures()
