"""The control socket only its owner can use (docs/operating.md, the security model).

- The socket is created with mode 0600; a second, unprivileged user made here with `useradd`
  cannot connect, and with `--control-mode 0666` it connects but SO_PEERCRED refuses every
  request (list, attach, detach, rules info, rules load), each refusal logged with its uid;
  the same user in `--control-group` is served.
- `attach` and `rules load` load only shared objects under `--nf-path` / `--rules-path` whose
  file and every parent belong to root or the user and are writable by nobody else, checked
  before `dlopen`: a .so whose constructor writes a marker file is refused from /tmp (by
  default and when /tmp is named), world-writable, or in a group-writable directory, and the
  marker never appears; the same .so from a trusted directory does load (its marker appears:
  the probe works) and is then refused as no NF.
- `.so` names resolve against the current directory, never the library search path.
- Requests are bounded: too long, too many fields, control bytes; the parser is fuzzed
  (runtime-c/fuzz/fuzz_control.c) for a few seconds.
- Payload files are written mode 0600.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.captures import REPO
from support.nf_chain import _cc
from support.oracle import TRACES
from support.trusted import trusted_dir

pytestmark = pytest.mark.serial  # network namespaces and a user of its own

CLIENT = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect:", e.errno); sys.exit(0)
s.sendall(sys.argv[2].encode() + b"\\n")
print(b"".join(iter(lambda: s.recv(65536), b"")).decode(), end="")
"""

CONSTRUCTOR = """
#include <stdio.h>
__attribute__((constructor)) static void mark(void)
{
    FILE *f = fopen(MARKER, "w");
    if (f) fclose(f);
}
int not_an_nf;
"""


def _client_python() -> str:
    """An interpreter the other user can run (this one may sit in root's home)."""
    for p in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(p, os.X_OK):
            return p
    return sys.executable


def _request(sock: Path, line: str, user: str | None = None) -> str:
    """One request line as `user` (None: this process's), the reply or "connect: ERRNO"."""
    kw = {"user": user, "group": grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name} if user else {}
    p = subprocess.run(
        [_client_python(), "-c", CLIENT, str(sock), line],
        capture_output=True, text=True, timeout=30, check=False, cwd="/", **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh network namespace: a live run on its loopback sees no packet, and answers."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces and useradd need root")
    ns = f"rgsec{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode:
        pytest.skip("the kernel refuses network namespaces")
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def other_user() -> Iterator[str]:
    """A second, unprivileged user (and its group), removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("useradd needs root")
    name = f"rgctl{os.getpid() % 100000}"
    p = subprocess.run(
        ["useradd", "-M", "-U", "-s", "/usr/sbin/nologin", name], capture_output=True
    )
    if p.returncode:
        pytest.skip(f"useradd refuses: {p.stderr.decode().strip()}")
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["groupdel", name], capture_output=True)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory everyone can traverse, for a socket others may try (pytest's tmp_path is
    root's only)."""
    d = Path(tempfile.mkdtemp(prefix="rg-sock-"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


class Live:
    """The binary on the namespace's loopback with --control SOCK (and more arguments)."""

    def __init__(self, exe: Path, ns: str, sock: Path, out: Path, *args: str) -> None:
        argv = ["ip", "netns", "exec", ns, str(exe), "--io", "live", "--iface", "lo"]
        argv += ["--duration", "120", "--control", str(sock), "--out", str(out), *args]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.01)
        assert sock.exists(), self.proc.communicate(timeout=60)

    def stop(self) -> str:
        """Stop it (SIGINT: its flush); its stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(2)
        _, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return err


REQUESTS = ["list", "attach\tflowstats\tx", "detach\tx", "rules\tinfo", "rules\tload\t/x.so"]


def test_only_the_owner_is_served(
    binary: Path,  # noqa: F811
    netns: str,
    other_user: str,
    open_dir: Path,
    tmp_path: Path,
) -> None:
    uid = pwd.getpwnam(other_user).pw_uid
    sock = open_dir / "ctl.sock"
    run = Live(binary, netns, sock, tmp_path)
    try:
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert _request(sock, "list") == "ok\n"  # the owner (root here) is served
        for r in REQUESTS:  # the socket's mode stops the other user at connect
            assert _request(sock, r, other_user) == "connect: 13\n"  # EACCES
    finally:
        run.stop()

    # a mode that lets everyone connect: the peer's uid refuses every request, logged
    sock.unlink(missing_ok=True)
    run = Live(binary, netns, sock, tmp_path, "--control-mode", "0666")
    try:
        assert stat.S_IMODE(sock.stat().st_mode) == 0o666
        for r in REQUESTS:
            assert _request(sock, r, other_user) == "error: permission denied\n", r
        assert _request(sock, "list") == "ok\n"
    finally:
        err = run.stop()
    refused = re.findall(rf"control: refused a connection: uid {uid} \(pid \d+\)", err)
    assert len(refused) == len(REQUESTS), err
    assert not (tmp_path / "flowstats.jsonl").exists()  # the attach never happened

    # the user's group named: served, and the socket is that group's
    sock.unlink(missing_ok=True)
    gid = pwd.getpwnam(other_user).pw_gid
    run = Live(
        binary, netns, sock, tmp_path, "--control-mode", "0660", "--control-group", other_user
    )
    try:
        st = sock.stat()
        assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == gid
        assert _request(sock, "list", other_user) == "ok\n"
    finally:
        run.stop()


def test_no_untrusted_constructor_runs(
    binary: Path,  # noqa: F811
    netns: str,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "constructor-ran"
    src = tmp_path / "evil.c"
    src.write_text(CONSTRUCTOR)
    evil_dir = Path(tempfile.mkdtemp(prefix="rg-evil-"))  # under /tmp (mode 1777)
    try:
        evil = _cc(src, evil_dir / "evil.so", f'-DMARKER="{marker}"')
        with trusted_dir("ctl-security") as good:
            writable = good / "w"
            writable.mkdir()
            os.chmod(writable, 0o775)  # a group-writable parent
            for d in (good, writable):
                shutil.copy(evil, d / "evil.so")
            shutil.copy(evil, good / "open.so")
            os.chmod(good / "open.so", 0o666)  # a world-writable file
            sock = tmp_path / "ctl.sock"
            cases = [  # (arguments, request, what the refusal says)
                ([], f"attach\t{evil}\tx", "is not under"),
                ([], f"rules\tload\t{evil}", "is not under"),
                (["--nf-path", str(evil_dir)], f"attach\t{evil}\tx", "/tmp is writable by others"),
                (["--rules-path", "/tmp"], f"rules\tload\t{evil}", "/tmp is writable by others"),
                (["--nf-path", str(good)], f"attach\t{good / 'open.so'}\tx", "writable by others"),
                (["--nf-path", str(good)], f"attach\t{writable / 'evil.so'}\tx", "its group"),
            ]
            for args, req, why in cases:
                sock.unlink(missing_ok=True)
                run = Live(binary, netns, sock, tmp_path, *args)
                try:
                    reply = _request(sock, req)
                finally:
                    err = run.stop()
                assert reply.startswith("error: refused: ") and why in reply, (req, reply)
                assert "control: refused to load" in err, err
                assert not marker.exists(), f"{req}: the constructor ran"
            # the probe works: from a trusted directory the library loads (its constructor
            # runs) and is refused after, as no NF
            sock.unlink(missing_ok=True)
            run = Live(binary, netns, sock, tmp_path, "--nf-path", str(good))
            try:
                reply = _request(sock, f"attach\t{good / 'evil.so'}\tx")
            finally:
                run.stop()
            assert "not an NF of this ABI" in reply, reply
            assert marker.exists()
    finally:
        shutil.rmtree(evil_dir, ignore_errors=True)


def test_so_names_resolve_against_the_current_directory(
    binary: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    capture = REPO / "captures" / "raw-ipv4-ipv6-http.pcap"
    _cc(REPO / "examples" / "nf" / "flowbytes_nf.c", tmp_path / "flowbytes.so")
    argv = [str(binary), str(capture), "--nf", "flowbytes.so", "--out", str(tmp_path / "o")]
    p = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "o" / "flowbytes.jsonl").read_text().strip()  # ./flowbytes.so ran
    # a name the library search path has (libpcap.so, the binary links libpcap) but the
    # current directory does not: not found there, never the system's library
    if not any(Path(d, "libpcap.so").exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib")):
        pytest.skip("no libpcap.so on the library path to tempt dlopen")
    argv[3] = "libpcap.so"
    p = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert p.returncode != 0
    assert f"cannot load: {tmp_path}/libpcap.so: cannot open" in p.stderr, p.stderr
    assert "No such file" in p.stderr, p.stderr


def test_requests_are_bounded(
    binary: Path,  # noqa: F811
    netns: str,
    tmp_path: Path,
) -> None:
    sock = tmp_path / "ctl.sock"
    run = Live(binary, netns, sock, tmp_path)
    try:
        assert _request(sock, "list\t" + "x" * 9000) == "error: the request is too long\n"
        many = "attach\tflowstats\tx" + "\tk=v" * 70
        assert _request(sock, many) == "error: too many fields\n"
        assert _request(sock, "list\x01") == "error: the request holds a control byte\n"
        assert _request(sock, "attach\tflowstats\tx\tnokv") == "error: 'nokv' is not KEY=VALUE\n"
        assert _request(sock, "rules\tload").startswith("error: unknown request")
        assert _request(sock, "list") == "ok\n"  # and it still serves
    finally:
        run.stop()


def test_fuzz_the_request_parser(tmp_path: Path) -> None:
    cc = shutil.which("clang-14") or shutil.which("clang")
    if not cc:
        pytest.skip("clang (libFuzzer) is not installed (bash ci/setup.sh --test installs it)")
    fuzzer = tmp_path / "fuzz_control"
    san = ["-fsanitize=address,undefined,fuzzer", "-fno-sanitize-recover=all"]
    subprocess.run(
        [cc, "-g", "-O1", "-std=c11", "-D_DEFAULT_SOURCE", *san,
         str(REPO / "runtime-c" / "fuzz" / "fuzz_control.c"),
         str(REPO / "runtime-c" / "main" / "rg_ctlsec.c"), "-o", str(fuzzer)],
        check=True,
    )  # fmt: skip
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for i, s in enumerate(["list\n", "attach\t/x/nf.so\tb\tk=v\n", "rules\tload\t/r.so\n"]):
        (seeds / str(i)).write_text(s)
    p = subprocess.run(
        [str(fuzzer), "-max_total_time=8", "-max_len=9000", "-print_final_stats=1",
         f"-artifact_prefix={tmp_path}/crash-", str(seeds)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    runs = int(re.search(r"stat::number_of_executed_units: (\d+)", p.stderr).group(1))  # type: ignore[union-attr]
    assert runs > 1000, p.stderr[-2000:]


def test_payload_files_are_the_owners_only(
    binary: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    capture = TRACES / "mixed-android-mobile.pcap"
    if not capture.is_file():
        pytest.skip(f"{capture.name} is not in {TRACES}")
    old = os.umask(0o022)  # what would make them world-readable
    try:
        p = subprocess.run(
            [str(binary), str(capture), "--nf", "streams", "--out", str(tmp_path / "o")],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    finally:
        os.umask(old)
    assert p.returncode == 0, p.stderr
    bins = list((tmp_path / "o").rglob("*.bin"))
    assert len(bins) > 10
    assert all(stat.S_IMODE(b.stat().st_mode) == 0o600 for b in bins)
