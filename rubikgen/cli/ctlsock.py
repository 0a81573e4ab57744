"""One request over a running binary's control socket (protocol in runtime-c/main/rg_control.c);
shared by `rubikgen ctl`'s chain, rules, stats and flows commands."""

from __future__ import annotations

import socket
import sys

EXIT_OK, EXIT_ERRORS = 0, 1


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


def reply(sock_path: str, fields: list[str], timeout: float) -> str | None:
    """A ctl command's request: the reply's text, or None with the error on stderr."""
    try:
        ok, text = request(sock_path, fields, timeout)
    except OSError as e:
        sys.stderr.write(f"rubikgen: error: {sock_path}: {e}\n")
        return None
    if not ok:
        sys.stderr.write(f"rubikgen: error: {text}\n")
        return None
    return text


def ask(sock_path: str, fields: list[str], timeout: float) -> int:
    """A ctl command's request: the reply on stdout, or the error on stderr; the exit status."""
    text = reply(sock_path, fields, timeout)
    if text is None:
        return EXIT_ERRORS
    sys.stdout.write(text)
    return EXIT_OK
