"""Shared by tests; moved from e2e/test_ude.py."""

from __future__ import annotations

from support.captures import REPO

STACK = REPO / "specs" / "stacks" / "tcp_tls_http.yaml"


#: captures whose requests tshark does not report as http.request, and why
EXCLUDED: dict[str, str] = {
    "ipv4-frag-tcp-overlap-ooo-crafted.pcap": (
        "crafted: the request head has no blank line, so tshark keeps it as a 'segment of a"
        " reassembled PDU' that never completes"
    ),
    "ipv6-http-atomic-frag.pcap": (
        "tshark marks the segments carrying the requests as spurious retransmissions (their"
        " handshake frames are out of time order) and does not dissect HTTP in them"
    ),
}
