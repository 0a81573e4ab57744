"""End to end: the tcp_ip_tunnels stack against tshark on every capture that carries a tunnel.

`specs/stacks/tcp_ip_tunnels.yaml` extends tcp_ip with PPPoE, MPLS, VXLAN, Geneve, GRE and IP in
IP, parsing inner packets with a grafted copy of tcp_ip's Ethernet-and-above subtree. On each
capture below:

- TCP: every direction of every stream tshark follows, mid-stream ones included (the stock tcp.yaml
  picks connections up mid-stream), must be delivered byte for byte (test_e2e_tshark's
  `compare`, with its matching rules);
- UDP: tshark's `follow,udp` cannot be the reference here: for a frame with two UDP headers (a
  VXLAN packet carrying DNS) it appends the payloads of both to each stream, and it names the
  sides by the innermost addresses. The reference is instead tshark's dissection of each UDP
  header (`udp.stream`, ports, `udp.payload`, the addresses of the IP header carrying it),
  concatenated per stream and sender; the stack's flow between the same endpoints must deliver
  exactly that, in both directions, for the outer tunnel flows and the inner ones alike;
- every stream tshark sees (also those without a handshake, e.g. a midstream capture) must have
  a flow of the stack between the same endpoints: the stack parsed through the tunnel to it.

The same comparison runs on crafted captures (tests/support/tunnel_captures.py, written with scapy,
dissected by tshark) for what no real capture carries: Geneve, GRE with IPv4, IPv6 and
transparent Ethernet bridging, 4in4, 6in6, an MPLS label stack, PPPoE/IPv6 under 802.1ad, VXLAN
over IPv6, Teredo, AYIYA, GRE inside GRE, PPP in GRE. The stack is built once; the runs share
the build.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import tunnel_captures
from support.captures import REPO, Run, flow_key, run_stack
from support.oracle import TRACES, Stream, encapsulations, reference_streams, tshark_available
from support.streams import _endpoints, compare, our_flows
from support.tunnels import compare_udp, only, udp_reference

STACK = REPO / "specs" / "stacks" / "tcp_ip_tunnels.yaml"

#: capture -> the encapsulations it exercises (MANIFEST.tsv's stacks_covered column).
TUNNEL_CAPTURES = {
    "vxlan-http.pcap": "eth>ip4>udp>vxlan>eth>ip4>tcp",
    "vxlan-ssh-aws-mirror.pcap": "eth>ip4>udp>vxlan>eth>ip4>tcp/udp",
    "mpls-in-vlan-http.pcap": "eth>vlan>mpls>ip4>tcp",
    "mpls-over-udp.pcap": "eth>ip4>udp>mpls>ip4>icmp (MPLS in UDP 6635)",
    "4in6-tcp-tls.pcap": "eth>ip6>ip4>tcp",
    "6in4-tcp-tls.pcap": "eth>ip4>ip6>tcp/udp",
    "qinq-pppoe-tls.pcap": "eth>vlan>vlan>pppoe>ppp>ip4>tcp",
    # a regression capture: 1024 fragments over GRE/PPP of one 65,515-byte UDP datagram
    "gre-ppp-ipfrag-crafted.pcap": "eth>ip4>gre>ppp>ip4(fragments)>udp",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Run]]:
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    root = tmp_path_factory.mktemp("e2e-tunnels")
    out: dict[str, Run] = {}

    def get(name: str) -> Run:
        if name not in out:
            out[name] = run_stack(TRACES / name, root / name.removesuffix(".pcap"), stack=STACK)
        return out[name]

    yield get


def _seen(s: Stream, paths: dict[tuple[str, int], frozenset[str]]) -> bool:
    """A stream with packets of its own (not only a header quoted in an ICMP error)."""
    return any(
        not {"icmp", "icmpv6"} & set(p.split(":")) for p in paths.get((s.proto, s.index), ())
    )


@pytest.mark.parametrize("name", sorted(TUNNEL_CAPTURES))
def test_tunnels_stack_delivers_what_tshark_dissects(name: str, runs: Callable[[str], Run]) -> None:
    pcap: Path = TRACES / name
    if not pcap.is_file():
        pytest.skip(f"{name} is not in {TRACES}")
    run = runs(name)
    assert run.returncode == 0, run.describe()
    paths = encapsulations(pcap)
    streams = [s for s in reference_streams(pcap) if _seen(s, paths)]
    tcp = tuple(s for s in streams if s.proto == "tcp")
    problems, totals = compare(name, only(run, "tcp"), tcp)
    udp_problems, n_dirs, n_bytes = compare_udp(name, run, udp_reference(pcap))
    print(
        f"\n[e2e-tunnels] {name}: TCP {totals.line()}; UDP {n_dirs} flow directions,"
        f" {n_bytes} bytes compared"
    )
    problems += udp_problems
    assert not problems, f"{name}: {len(problems)} differences from tshark:\n" + "\n".join(
        problems[:40]
    )
    if name == "gre-ppp-ipfrag-crafted.pcap":  # the reassembled datagram was seen, whole
        assert n_dirs == 2 and n_bytes == 65515 - 8, (n_dirs, n_bytes)  # and the empty reply side
    ours = our_flows(run)
    unseen = [f"{s.proto} {s.index}" for s in streams if _endpoints(s) not in ours]
    assert not unseen, f"{name}: no flow of the stack for tshark's streams {unseen}"
    assert streams, f"{name}: tshark sees no stream"


def test_udp_reference_keys_match_flow_key() -> None:
    # the reference's senders are compared with flows.jsonl's (address, port) as flow_key
    # normalises them; IPv6 addresses in tshark's -n output are already in that form
    _, src, sport, _, _ = flow_key("udp", "2001:db8::1", 53, "10.0.0.1", 9)
    assert (src, sport) == ("2001:db8::1", 53)


@pytest.mark.parametrize("name", sorted(tunnel_captures.WRAPS))
def test_tunnels_stack_on_crafted_captures(
    name: str, runs: Callable[[str], Run], tmp_path: Path
) -> None:
    """The encapsulations no real capture carries (tests/support/tunnel_captures.py), against tshark:
    the inner TCP connection (handshake, both directions) and the inner UDP exchange must be
    delivered exactly, and the outer UDP flows of UDP tunnels too."""
    pcap = tunnel_captures.write(name, tmp_path)
    run = run_stack(pcap, tmp_path / "out", stack=STACK)
    assert run.returncode == 0, run.describe()
    streams = reference_streams(pcap)
    assert [(s.proto, s.c2s.flow.handshake) for s in streams if s.proto == "tcp"] == [("tcp", True)]
    tcp = tuple(s for s in streams if s.proto == "tcp")
    problems, totals = compare(name, only(run, "tcp"), tcp)
    udp_problems, n_dirs, n_bytes = compare_udp(name, run, udp_reference(pcap))
    assert not problems + udp_problems, problems + udp_problems
    assert totals.directions == 2 and totals.bytes > 1000
    # the UDP exchange inside the tunnel (below IP for MPLS and PPPoE, an inner_ layer else)
    inner_udp = [r for r in run.records() if {r["sport"], r["dport"]} == {53, 33333}]
    assert sum(r["bytes"] for r in inner_udp) == len(b"ping over udp") + len(
        b"pong over udp, longer"
    )
    assert n_dirs >= 2


def test_tutorial_vxlan_recipe_matches_tshark(tmp_path: Path) -> None:
    """docs/tutorial.md's "add an encapsulation" recipe: tcp_ip + VXLAN in a few lines of
    `extends:`, built and compared with tshark on vxlan-http.pcap like tcp_ip_tunnels."""
    if not tshark_available():
        pytest.skip("tshark is not installed (bash ci/setup.sh installs it)")
    pcap = TRACES / "vxlan-http.pcap"
    if not pcap.is_file():
        pytest.skip(f"vxlan-http.pcap is not in {TRACES}")
    recipe = REPO / "docs" / "tutorial" / "tcp_ip_vxlan.yaml"
    run = run_stack(pcap, tmp_path / "out", stack=recipe)
    assert run.returncode == 0, run.describe()
    streams = reference_streams(pcap)
    tcp = tuple(s for s in streams if s.proto == "tcp")
    problems, totals = compare("vxlan-http.pcap", only(run, "tcp"), tcp)
    udp_problems, n_dirs, _ = compare_udp("vxlan-http.pcap", run, udp_reference(pcap))
    assert not problems + udp_problems, problems + udp_problems
    assert totals.directions == 2 and n_dirs == 2  # the inner HTTP connection, the outer UDP flow
    inner = [r for r in run.records() if r["layer"] == "inner_tcp"]
    assert sum(r["bytes"] for r in inner) == totals.bytes > 0
