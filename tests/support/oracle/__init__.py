"""Reference oracles for the end-to-end tests: what other tools say a capture contains.

`oracle.tshark` computes, with tshark alone, the bytes each TCP/UDP flow direction of a capture
delivers (the records the `streams` NF writes to flows.jsonl), and which of the real captures in
../shared/traces the tcp_ip stack can be compared on. pytest puts tests/ on sys.path (the test
modules are rootless), so tests import it as `from support.oracle import reference_flows`.
"""

from .tshark import (
    ELIGIBLE,
    EXCLUDED,
    TRACES,
    Direction,
    FlowDir,
    Gap,
    OracleError,
    Stream,
    conversations,
    eligible_captures,
    encapsulations,
    frame_times,
    prefetch,
    reference_flows,
    reference_streams,
    tshark_available,
    tshark_version,
)

__all__ = [
    "ELIGIBLE",
    "EXCLUDED",
    "TRACES",
    "Direction",
    "FlowDir",
    "Gap",
    "OracleError",
    "Stream",
    "conversations",
    "eligible_captures",
    "encapsulations",
    "frame_times",
    "prefetch",
    "reference_flows",
    "reference_streams",
    "tshark_available",
    "tshark_version",
]
