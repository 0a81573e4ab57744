"""A stack's memory caps (`limits:`, issue 14): sizes to bytes, the built-in defaults; and
durations (`timeout:`, `linger:`) to seconds."""

from __future__ import annotations

import re
from typing import Any

from rubikgen.sema.model import ResolvedLimits

# Per worker (stack context).  Suricata defaults to 64 MB of reassembly and 32 MB of stream
# state for the whole process; rubikgen's caps are per worker and sized for a 24 GB machine
# running up to ~16 workers beside other work: 256 MiB + 256 MiB each (8 GiB at 16 workers),
# enough for the default 262,144 instances per layer of a TCP/IP stack (records of 150-300
# bytes) and megabytes of out-of-order data on thousands of connections.
DEFAULT_REASSEMBLY = 256 << 20
DEFAULT_FLOWS = 256 << 20
DEFAULT_POLICY = "evict-oldest"
UNLIMITED = (1 << 64) - 1  # UINT64_MAX: no cap (a size of 0)

_UNITS = {"k": 10, "m": 20, "g": 30, "t": 40}


def size_bytes(v: int | str) -> int:
    """Bytes of a size (validated by the model's pattern): 64M -> 67108864; 0 -> UNLIMITED."""
    if isinstance(v, int):
        n = v
    else:
        t = v.lower().removesuffix("b")
        n = int(t[:-1]) << _UNITS[t[-1]] if t[-1] in _UNITS else int(t)
    # a cap beyond what 64 bits address (or a negative int, which the pattern cannot give) is
    # no cap at all
    return UNLIMITED if n <= 0 or n >= UNLIMITED else n


def resolved_limits(lim: Any) -> ResolvedLimits:
    """The caps in bytes (UNLIMITED: none) and the policy, defaults filled in."""
    ra = getattr(lim, "memcap_reassembly", None)
    fl = getattr(lim, "memcap_flows", None)
    pol = getattr(lim, "memcap_policy", None)
    return ResolvedLimits(
        DEFAULT_REASSEMBLY if ra is None else size_bytes(ra),
        DEFAULT_FLOWS if fl is None else size_bytes(fl),
        pol or DEFAULT_POLICY,
    )


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if 0 < v < 1e12 else None  # also rejects inf and nan
    m = _DURATION.match(str(v))
    if not m:
        return None
    mult = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    val = float(m.group(1)) * mult
    return val if 0 < val < 1e12 else None
