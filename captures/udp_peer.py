"""The UDP peers of captures/make-quickstart-capture.sh.

`serve PORT`: answers every datagram on PORT (IPv4 and IPv6) with a short response naming its
length, for ten seconds. `ask HOST PORT N`: sends one request of N bytes and waits for the
response (N larger than the link's MTU: the kernel fragments the request).
"""

from __future__ import annotations

import socket
import sys


def serve(port: int) -> None:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # IPv4 too, as ::ffff:a.b.c.d
    s.bind(("::", port))
    s.settimeout(10)
    try:
        while True:
            data, peer = s.recvfrom(65535)
            s.sendto(b"got %d bytes, first line: " % len(data) + data.split(b"\n")[0], peer)
    except TimeoutError:
        pass


def ask(host: str, port: int, size: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.settimeout(5)
    line = b"request of %d bytes\n" % size
    s.sendto((line * (size // len(line) + 1))[:size], (host, port))
    print(s.recvfrom(65535)[0].decode())


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        ask(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
