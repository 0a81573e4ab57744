#!/usr/bin/env bash
# Records captures/veth-http-udp-frag.pcap, the quick start's capture: real programs talking
# across a veth pair between two network namespaces, recorded by tcpdump on one end.
#   - curl fetching a file from `python3 -m http.server` over IPv4 and over IPv6 (handshake,
#     request, response, close: HTTP/1.0, the server closes);
#   - a UDP request and its response over IPv4 and over IPv6 (captures/udp_peer.py);
#   - one UDP request of 3000 bytes over IPv4, larger than the link's MTU (1500), so the kernel
#     sends it as IP fragments; the response to it is small.
# Offloads are off on both ends, so tcpdump sees the frames as they go on the wire (no 64 KB
# GSO segments, full checksums); static neighbours, so there is no ARP or neighbour discovery.
# Needs root, iproute2, ethtool, tcpdump, curl and python3. Usage: sudo bash captures/make-quickstart-capture.sh [OUT.pcap]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-captures/veth-http-udp-frag.pcap}
A=rgcap-a B=rgcap-b
WORK=""
cleanup() {
  ip netns pids "$B" 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
  [ -z "$WORK" ] || rm -rf "$WORK"
}
cleanup  # namespaces left by an interrupted run
trap cleanup EXIT
WORK=$(mktemp -d)

ip netns add "$A"
ip netns add "$B"
ip link add va netns "$A" type veth peer name vb netns "$B"
for ns in "$A" "$B"; do
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=0
done
ip -n "$A" link set va address 02:00:00:00:00:0a mtu 1500 up
ip -n "$B" link set vb address 02:00:00:00:00:0b mtu 1500 up
ip -n "$A" addr add 10.77.0.1/24 dev va
ip -n "$B" addr add 10.77.0.2/24 dev vb
ip -n "$A" addr add fd77::1/64 dev va nodad
ip -n "$B" addr add fd77::2/64 dev vb nodad
ip -n "$A" neigh add 10.77.0.2 lladdr 02:00:00:00:00:0b dev va nud permanent
ip -n "$B" neigh add 10.77.0.1 lladdr 02:00:00:00:00:0a dev vb nud permanent
ip -n "$A" neigh add fd77::2 lladdr 02:00:00:00:00:0b dev va nud permanent
ip -n "$B" neigh add fd77::1 lladdr 02:00:00:00:00:0a dev vb nud permanent
ip netns exec "$A" ethtool -K va tso off gso off gro off tx off rx off >/dev/null
ip netns exec "$B" ethtool -K vb tso off gso off gro off tx off rx off >/dev/null

# the served file: 6000 bytes of deterministic text (several segments each way)
mkdir -p "$WORK/www"
python3 -c 'import sys; sys.stdout.write("".join(f"line {i:04d} of the rubikgen quick start capture\n" for i in range(1, 125)))' >"$WORK/www/index.txt"

ip netns exec "$B" tcpdump -i vb -s 0 -U -n -w "$WORK/cap.pcap" 'tcp or udp' 2>"$WORK/tcpdump.log" &
DUMP=$!
ip netns exec "$B" python3 -m http.server 8080 --bind :: --directory "$WORK/www" >/dev/null 2>&1 &
ip netns exec "$B" python3 captures/udp_peer.py serve 7000 &
sleep 2   # tcpdump, the servers listening

ip netns exec "$A" curl -s -4 --http1.0 -o /dev/null http://10.77.0.2:8080/index.txt
ip netns exec "$A" curl -s -6 --http1.0 -o /dev/null "http://[fd77::2]:8080/index.txt"
ip netns exec "$A" python3 captures/udp_peer.py ask 10.77.0.2 7000 120
ip netns exec "$A" python3 captures/udp_peer.py ask fd77::2 7000 120
ip netns exec "$A" python3 captures/udp_peer.py ask 10.77.0.2 7000 3000
sleep 1
kill -INT "$DUMP"
wait "$DUMP" || true
cp "$WORK/cap.pcap" "$OUT"
echo "wrote $OUT: $(tail -n +1 "$WORK/tcpdump.log" | grep -o '[0-9]* packets captured' || true)"
