"""The systemd unit of docs/operating.md ("Running as a service", docs/examples/rubikgen@.service).

- `systemd-analyze verify` accepts the unit (its ExecStart pointed at a real built binary).
- The unit's ExecStart, run the way systemd would run it (the unit's user, made here with
  `useradd`, holding only the unit's capabilities through `setpriv`, its UMask, `%i` = `lo` of a
  fresh network namespace), captures live traffic made in that namespace, answers `ctl stats`
  on its socket (mode 0600, owned by the service user), goes on after the unit's reload signal,
  and on the unit's KillSignal stops with
  the final flush: the EVE flow record of a TCP connection still open is written, its packet
  counts per direction equal tshark's conversation table of a tcpdump capture of the same
  traffic, and every file it wrote is private to the user (UMask=0077).
"""

from __future__ import annotations

import configparser
import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.captures import REPO
from support.conversations import tshark_frames
from support.sources import _build

UNIT = REPO / "docs" / "examples" / "rubikgen@.service"
BIN_IN_UNIT = "/opt/rubikgen/tcp_ip/tcp_ip"


def _service() -> dict[str, str]:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string(UNIT.read_text(encoding="utf-8"))
    return dict(cp["Service"])


def _open_dir(prefix: str) -> Path:
    """A directory the service user can reach (pytest's tmp_path is under root's 0700 one)."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(d, 0o755)
    return d


@pytest.fixture(scope="module")
def binary() -> Iterator[Path]:
    out = _open_dir("rg-unit-bin-")
    try:
        r = _build(out, "pcap")
        assert r.returncode == 0, r.stderr
        yield out / "tcp_ip"
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture
def service_dir() -> Iterator[Path]:
    d = _open_dir("rg-unit-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_systemd_analyze_verifies_the_unit(binary: Path, tmp_path: Path) -> None:
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed (ci/setup.sh --test installs systemd)")
    text = UNIT.read_text(encoding="utf-8")
    assert BIN_IN_UNIT in text
    unit = tmp_path / "rubikgen@.service"
    unit.write_text(text.replace(BIN_IN_UNIT, str(binary)), encoding="utf-8")
    p = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", f"{unit}"[:-len(".service")] + "lo.service"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if p.returncode and "Failed to connect" in p.stderr + p.stdout:
        pytest.skip(f"systemd-analyze cannot run here: {p.stderr.strip()}")
    # (a template is verified as one of its instances) a clean unit prints nothing: an unknown
    # key or a bad value is only a warning, exit status 0
    assert p.returncode == 0, p.stdout + p.stderr
    assert not (p.stdout + p.stderr).strip(), p.stdout + p.stderr


@pytest.fixture
def service_user() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("useradd, setpriv and network namespaces need root")
    for tool in ("useradd", "setpriv", "ip", "tcpdump", "tshark"):
        if not shutil.which(tool):
            pytest.skip(f"`{tool}` is not installed (ci/setup.sh --test)")
    name = f"rgsvc{os.getpid() % 100000}"
    p = subprocess.run(["useradd", "--system", "-M", "-U", "-s", "/usr/sbin/nologin", name],
                       capture_output=True, text=True, check=False)  # fmt: skip
    if p.returncode:
        pytest.skip(f"useradd refuses: {p.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
        subprocess.run(["groupdel", name], capture_output=True, check=False)


@pytest.fixture
def netns() -> Iterator[str]:
    ns = f"rgunit{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", ns], capture_output=True, check=False).returncode:
        pytest.skip("the kernel refuses network namespaces")
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


_TRAFFIC = r"""
import socket, sys, time
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
c = socket.create_connection(srv.getsockname()); s, _ = srv.accept()
print(c.getsockname()[1], srv.getsockname()[1], flush=True)
for i in range(5):
    c.sendall(b"q" * 100); s.recv(100); s.sendall(b"r" * 300); c.recv(300); time.sleep(0.05)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.sendto(b"datagram", ("127.0.0.1", 9))
sys.stdin.read()  # the connection stays open until the test has stopped the service
"""


def _wait_for(cond: object, secs: float, what: str) -> None:
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if callable(cond) and cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_units_command_runs_as_the_unit_says(
    binary: Path, service_user: str, netns: str, service_dir: Path
) -> None:
    tmp_path = service_dir
    svc = _service()
    user = pwd.getpwnam(service_user)
    iface = "lo"
    # systemd's RuntimeDirectory= and LogsDirectory=, owned by User=, moved under tmp_path
    run_dir, logs = tmp_path / "run" / "rubikgen", tmp_path / "log" / "rubikgen" / iface
    for d in (run_dir, logs):
        d.mkdir(parents=True)
        os.chown(d, user.pw_uid, user.pw_gid)
    os.chmod(run_dir, int(svc["RuntimeDirectoryMode"], 8))
    argv = shlex.split(
        svc["ExecStart"]
        .replace("%i", iface)
        .replace(BIN_IN_UNIT, str(binary))
        .replace("/run/rubikgen", str(run_dir))
        .replace("/var/log/rubikgen/" + iface, str(logs))
    )
    # --metrics 127.0.0.1:9101 is free: the namespace is the test's own
    caps = ",".join(
        "+" + c.lower().removeprefix("cap_") for c in svc["AmbientCapabilities"].split()
    )
    prefix = ["ip", "netns", "exec", netns, "setpriv", f"--reuid={user.pw_uid}",
              f"--regid={user.pw_gid}", "--init-groups", f"--inh-caps={caps}",
              f"--ambient-caps={caps}", f"--bounding-set=-all,{caps}"]  # fmt: skip
    if svc.get("NoNewPrivileges") == "yes":
        prefix.append("--no-new-privs")
    umask = int(svc["UMask"], 8)
    pcap = tmp_path / "lo.pcap"
    dump = subprocess.Popen(
        ["ip", "netns", "exec", netns, "tcpdump", "-i", "lo", "-U", "-w", str(pcap)],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert dump.stderr is not None
    dump.stderr.readline()  # "listening on lo ..."
    svc_p = subprocess.Popen(
        [*prefix, "--", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        umask=umask,
    )  # fmt: skip
    sock = run_dir / f"{iface}.sock"
    traffic = None
    try:
        _wait_for(lambda: sock.exists() or svc_p.poll() is not None, 30, "the control socket")
        assert svc_p.poll() is None, svc_p.communicate()[1]
        st = sock.stat()
        assert (st.st_mode & 0o777, st.st_uid) == (0o600, user.pw_uid)
        time.sleep(0.3)  # the capture handle is open before the socket is; let it settle
        traffic = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, "-c", _TRAFFIC],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert traffic.stdout is not None
        cport, sport = (int(x) for x in traffic.stdout.readline().split())

        def seen() -> bool:
            ask = subprocess.run(
                [sys.executable, "-m", "rubikgen", "ctl", str(sock), "stats"],
                capture_output=True, text=True, check=False,
                env=dict(os.environ, PYTHONPATH=str(REPO)),
            )  # fmt: skip
            assert ask.returncode == 0, ask.stderr
            # the datagram is sent after the connection's exchanges: once it is counted, so are they
            udp = json.loads(ask.stdout)["total"]["layers"].get("udp", {})
            return int(udp.get("opened", 0)) >= 1

        _wait_for(seen, 30, "ctl stats to count the traffic")
        # systemctl reload (ExecReload: kill -HUP) reopens the outputs; the run goes on
        assert svc["ExecReload"] == "/bin/kill -HUP $MAINPID"
        svc_p.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert svc_p.poll() is None, svc_p.communicate()[1]
        assert seen()
        svc_p.send_signal(getattr(signal, svc["KillSignal"]))
        out, err = svc_p.communicate(timeout=int(svc["TimeoutStopSec"]))
        assert svc_p.returncode == 0, err
    finally:
        if svc_p.poll() is None:
            svc_p.kill()
        # the capture ends before the connection does: its FIN exchange came after the service
        time.sleep(0.3)
        dump.send_signal(signal.SIGINT)
        dump.communicate(timeout=10)
        if traffic is not None:
            traffic.communicate(input="", timeout=10)

    written = sorted(p for p in logs.rglob("*") if p.is_file())
    assert written, "the service wrote nothing"
    for p in written:
        st = p.stat()
        assert (st.st_mode & 0o077, st.st_uid) == (0, user.pw_uid), p
    flows = [json.loads(line) for line in (logs / "eve.json").read_text().splitlines()]
    mine = [
        f for f in flows
        if f.get("event_type") == "flow" and {f.get("src_port"), f.get("dest_port")} == {cport, sport}
    ]  # fmt: skip
    assert len(mine) == 1, flows
    # the reference: tshark's conversation table of what tcpdump saw on the same loopback
    frames = tshark_frames(pcap)
    client, server = ("127.0.0.1", cport), ("127.0.0.1", sport)
    rec = mine[0]
    assert (rec["src_port"], rec["dest_port"]) == (cport, sport)  # client: the SYN sender
    got = (rec["flow"]["pkts_toserver"], rec["flow"]["pkts_toclient"])
    assert got == (frames["tcp", client, server], frames["tcp", server, client])
    assert rec["flow"]["reason"] == "shutdown", rec  # open when the service stopped: flushed
