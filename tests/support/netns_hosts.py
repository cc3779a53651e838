"""Separate "hosts" on one Linux machine: network namespaces joined by veth pairs to a bridge.

Host ``i`` is the namespace ``<prefix><i>`` with interface ``eth0`` at ``10.77.0.<i+1>/24``; every
command run in it also gets its own UTS namespace whose hostname is the namespace's name, so
hostname-based locality (HOROVOD_HOSTNAME, Open MPI, Spark) sees N machines. The bridge
``<prefix>br0`` in the root namespace carries ``10.77.0.254``: the process that builds the hosts
(a pytest driver, a benchmark) reaches every host and every host reaches it, and nothing in
10.77.0.0/24 leaves the machine. Each host name resolves through /etc/hosts lines tagged with
``# netns_hosts:<prefix>``, removed again at teardown.

A link can be limited with ``tc ... tbf`` (``link_rate='10gbit'``, both directions) and cut with
``link_down(i)``. ``extra_iface=True`` gives each host a second interface, ``eth1``, whose address
(10.78.<i>.1/24) reaches nothing: the case of a machine with a management NIC that cannot reach
its peers.

Needs root and ``ip``/``tc``/``unshare``; ``unavailable_reason()`` says why not. Setup first
removes anything a crashed earlier run with the same prefix left behind, and a lock file keeps two
runs with one prefix from building over each other.
"""
import fcntl
import os
import shutil
import signal
import subprocess
import time
from typing import Dict, List, Optional, Sequence

SUBNET = "10.77.0"
ROOT_ADDR = SUBNET + ".254"
HOSTS_FILE = "/etc/hosts"
_LOCK_WAIT_S = 120.0


def unavailable_reason() -> Optional[str]:
    """Why network-namespace hosts cannot be built here, or None when they can."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "multi-host tests need root (network namespaces, veth, tc)"
    for tool in ("ip", "tc", "unshare", "hostname"):
        if shutil.which(tool) is None:
            return "multi-host tests need the %r command" % tool
    probe = "mhprobe%d" % os.getpid()
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return "cannot create a network namespace here: %s" % made.stderr.strip()
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError("%s failed (exit %d): %s" % (" ".join(argv), done.returncode, done.stderr.strip()))
    return done


class NetnsHosts:
    """``n`` namespace hosts; use as a context manager (or call ``setup()`` / ``teardown()``)."""

    def __init__(self, n: int, link_rate: Optional[str] = None, prefix: str = "mh", extra_iface: bool = False):
        if n < 1 or n > 200:
            raise ValueError("n must be between 1 and 200 hosts, got %r" % (n,))
        self.n = n
        self.link_rate = link_rate
        self.prefix = prefix
        self.extra_iface = extra_iface
        self.bridge = prefix + "br0"
        self._procs: List[subprocess.Popen] = []
        self._lock_fd: Optional[int] = None

    # ------------------------------------------------------------------ names

    def name(self, i: int) -> str:
        """Host ``i``'s namespace name, hostname and /etc/hosts name."""
        return "%s%d" % (self.prefix, i)

    def addr(self, i: int) -> str:
        return "%s.%d" % (SUBNET, i + 1)

    def root_link(self, i: int) -> str:
        """The root-namespace end of host ``i``'s veth pair (the bridge port)."""
        return "%sv%d" % (self.prefix, i)

    @property
    def names(self) -> List[str]:
        return [self.name(i) for i in range(self.n)]

    @property
    def addrs(self) -> List[str]:
        return [self.addr(i) for i in range(self.n)]

    @property
    def marker(self) -> str:
        return "# netns_hosts:" + self.prefix

    # ------------------------------------------------------------------ life cycle

    def __enter__(self) -> "NetnsHosts":
        return self.setup()

    def __exit__(self, *exc) -> None:
        self.teardown()

    def setup(self) -> "NetnsHosts":
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        self._lock()
        try:
            self._remove_leftovers()
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def _lock(self) -> None:
        path = "/run/netns_hosts.%s.lock" % self.prefix
        self._lock_fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        deadline = time.monotonic() + _LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError("another run holds %s for more than %.0f s; namespace hosts with prefix %r "
                                       "are in use" % (path, _LOCK_WAIT_S, self.prefix)) from None
                time.sleep(0.5)

    def _build(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", ROOT_ADDR + "/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for i in range(self.n):
            ns, root_end, peer_end = self.name(i), self.root_link(i), "%sp%d" % (self.prefix, i)
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", root_end, "type", "veth", "peer", "name", peer_end)
            _run("ip", "link", "set", peer_end, "netns", ns)
            _run("ip", "netns", "exec", ns, "ip", "link", "set", peer_end, "name", "eth0")
            _run("ip", "netns", "exec", ns, "ip", "addr", "add", self.addr(i) + "/24", "dev", "eth0")
            _run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            _run("ip", "link", "set", root_end, "master", self.bridge)
            _run("ip", "link", "set", root_end, "up")
            if self.extra_iface:
                # A second NIC whose subnet has no one else on it: reaches nothing.
                # (a veth pair kept inside the namespace: the kernel here may lack the dummy type).
                _run("ip", "netns", "exec", ns, "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth1end")
                _run("ip", "netns", "exec", ns, "ip", "addr", "add", "10.78.%d.1/24" % i, "dev", "eth1")
                _run("ip", "netns", "exec", ns, "ip", "link", "set", "eth1end", "up")
                _run("ip", "netns", "exec", ns, "ip", "link", "set", "eth1", "up")
            if self.link_rate:
                self.limit(i, self.link_rate)
        with open(HOSTS_FILE, "a") as f:
            for i in range(self.n):
                f.write("%s %s %s\n" % (self.addr(i), self.name(i), self.marker))

    def limit(self, i: int, rate: str) -> None:
        """Limit host ``i``'s link to ``rate`` (tc syntax, e.g. '10gbit') in both directions."""
        # A burst of rate/100 (10 ms of traffic) lets tbf keep up with the rate at HZ timer ticks.
        bits = rate_bits(rate)
        burst = str(max(64 << 10, bits // 8 // 100))
        for cmd in (["tc"], ["ip", "netns", "exec", self.name(i), "tc"]):
            dev = self.root_link(i) if len(cmd) == 1 else "eth0"
            _run(*cmd, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", burst, "latency", "50ms")

    def _remove_leftovers(self) -> None:
        listed = _run("ip", "netns", "list", check=False).stdout.split()
        for ns in listed:
            if ns.startswith(self.prefix) and ns[len(self.prefix):].isdigit():
                self._kill_namespace_pids(ns)
                _run("ip", "netns", "del", ns, check=False)
        links = _run("ip", "-o", "link", "show", check=False).stdout.splitlines()
        for line in links:
            dev = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
            if dev == self.bridge or (dev.startswith(self.prefix + "v") and dev[len(self.prefix) + 1:].isdigit()):
                _run("ip", "link", "del", dev, check=False)
        self._remove_hosts_lines()

    def _remove_hosts_lines(self) -> None:
        try:
            with open(HOSTS_FILE) as f:
                lines = f.readlines()
        except OSError:
            return
        kept = [line for line in lines if not line.rstrip().endswith(self.marker)]
        if len(kept) != len(lines):
            # Rewritten in place: /etc/hosts may be a bind mount that a rename would not replace.
            with open(HOSTS_FILE, "w") as f:
                f.writelines(kept)

    def _kill_namespace_pids(self, ns: str) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = [int(p) for p in _run("ip", "netns", "pids", ns, check=False).stdout.split() if p.isdigit()]
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and _run("ip", "netns", "pids", ns, check=False).stdout.strip():
                time.sleep(0.1)

    def teardown(self) -> None:
        """Stop every process started in the hosts and remove namespaces, links and /etc/hosts lines."""
        for p in self._procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        try:
            self._remove_leftovers()
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    # ------------------------------------------------------------------ running things

    def command(self, i: int, argv: Sequence[str]) -> List[str]:
        """``argv`` wrapped to run on host ``i``: its network namespace and its own hostname."""
        ns = self.name(i)
        set_hostname = 'hostname "$0" && exec "$@"'
        return ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", set_hostname, ns] + list(argv)

    def exec(self, i: int, argv: Sequence[str], timeout: float = 60, check: bool = True,
             env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        done = subprocess.run(self.command(i, argv), capture_output=True, text=True, timeout=timeout, env=env)
        if check and done.returncode != 0:
            raise RuntimeError("on %s: %s failed (exit %d): %s"
                               % (self.name(i), " ".join(argv), done.returncode, done.stderr.strip()))
        return done

    def popen(self, i: int, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start ``argv`` on host ``i`` in a process group of its own; teardown kills it."""
        kwargs.setdefault("start_new_session", True)
        p = subprocess.Popen(self.command(i, argv), **kwargs)
        self._procs.append(p)
        return p

    def kill_host_processes(self, i: int) -> None:
        """SIGKILL everything running on host ``i`` (a host that dies)."""
        for pid in _run("ip", "netns", "pids", self.name(i), check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

    def link_down(self, i: int) -> None:
        """Cut host ``i`` off the bridge (its cable pulled): no RST, no FIN, packets just vanish."""
        _run("ip", "link", "set", self.root_link(i), "down")

    def link_up(self, i: int) -> None:
        _run("ip", "link", "set", self.root_link(i), "up")


def rate_bits(rate: str) -> int:
    """bits/s of a tc rate such as '10gbit', '500mbit', '1000kbit'."""
    units = {"gbit": 10 ** 9, "mbit": 10 ** 6, "kbit": 10 ** 3, "bit": 1}
    text = rate.strip().lower()
    for unit, scale in units.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * scale)
    raise ValueError("link rate %r: use a tc rate such as '10gbit' or '500mbit'" % rate)


def hosts_fixture(n: int, scope: str = "module", **kwargs):
    """A pytest fixture giving a ``NetnsHosts(n, **kwargs)``, torn down after its scope (also when
    its tests fail); its tests skip, with the reason, where namespaces cannot be built."""
    import pytest

    @pytest.fixture(scope=scope)
    def netns_hosts():
        reason = unavailable_reason()
        if reason:
            pytest.skip(reason)
        with NetnsHosts(n, **kwargs) as hosts:
            yield hosts
    return netns_hosts
