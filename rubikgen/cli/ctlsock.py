"""One request over a running binary's control socket (protocol in runtime-c/main/rg_control.c);
shared by `rubikgen ctl`'s chain, rules, stats and flows commands."""

from __future__ import annotations

import socket


def request(sock_path: str, fields: list[str], timeout: float = 30.0) -> tuple[bool, str]:
    """Send one request; (ok, the reply's text after its status line)."""
    if any("\t" in f or "\n" in f for f in fields):
        return False, "arguments may not contain tabs or newlines"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        s.sendall(("\t".join(fields) + "\n").encode())
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    reply = b"".join(chunks).decode(errors="replace")
    head, _, rest = reply.partition("\n")
    if head == "ok":
        return True, rest
    return False, head.removeprefix("error: ") if head else "no reply (the run ended?)"
