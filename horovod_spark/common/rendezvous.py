"""How a rank learns every other rank's address before the native core connects them.

Three sources, tried in order: an mpi4py communicator (``hvd.init(comm=...)`` or running under
``mpirun``), the authenticated KV service named by the environment (launcher and Spark runner), or
nothing at all (a single rank, like Horovod started without a launcher).
"""
import hashlib
import json
import logging
import os
import socket
import time
from dataclasses import dataclass, field, replace
from typing import List, Optional

from horovod_spark.common import config
from horovod_spark.common.kv_client import KVClient
from horovod_spark.exceptions import ConfigError

_log = logging.getLogger(__name__)


@dataclass
class PeerRecord:
    rank: int
    host: str      # address other ranks connect to
    port: int
    host_id: str   # equal host_id => same machine => shared memory
    # [address, interface] pairs this rank can be reached at, best first (peer_addresses.py)
    candidates: list = field(default_factory=list)

    def with_host(self, host: str) -> "PeerRecord":
        return replace(self, host=host)

    def encode(self) -> bytes:
        return json.dumps(self.__dict__).encode()

    @staticmethod
    def decode(data: bytes) -> "PeerRecord":
        return PeerRecord(**json.loads(data.decode()))


@dataclass
class Identity:
    rank: int
    size: int
    source: str  # "single", "env", "mpi"
    comm: object = None


_MPI_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")


def identity_from(comm=None, environ=None) -> Identity:
    env = os.environ if environ is None else environ
    if isinstance(comm, (list, tuple)) and not comm:
        comm = None  # Horovod's default: an empty rank list means every rank
    if comm is None and not config.RANK.is_set(env) and any(v in env for v in _MPI_RANK_VARS):
        from mpi4py import MPI  # launched by mpirun without our launcher
        comm = MPI.COMM_WORLD
    if comm is not None:
        if isinstance(comm, (list, tuple)):
            raise ValueError("hvd.init(comm=%r): a list of ranks is only supported empty (every rank); for a "
                             "subset pass an mpi4py communicator, e.g. "
                             "MPI.COMM_WORLD.Create_group(MPI.COMM_WORLD.group.Incl(ranks))" % (list(comm),))
        return Identity(comm.Get_rank(), comm.Get_size(), "mpi", comm)
    if not config.RANK.is_set(env):
        return Identity(0, 1, "single")
    rank = config.RANK.get(env)
    size = config.SIZE.require(env, hint="it goes with %s (the launchers set both)" % config.RANK.name)
    if rank >= size:
        raise ConfigError("%s=%d is not below %s=%d; a job of N ranks numbers them 0 to N-1"
                          % (config.RANK.name, rank, config.SIZE.name, size))
    return Identity(rank, size, "env")


def host_id(environ=None) -> str:
    return config.HOSTNAME.get(environ) or socket.gethostname()


def interface_ipv4(name: str) -> Optional[str]:
    """The IPv4 address of network interface ``name`` (Linux), or None when it has none."""
    import fcntl
    import struct
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def advertised_address(environ=None) -> str:
    """The address of this host that other ranks can reach: that of the first interface named in
    HOROVOD_GLOO_IFACE (Horovod's variable; ``nics=`` of horovod_spark.run sets it) that has one,
    else the interface that routes to the rendezvous service (loopback when it is local)."""
    chosen = config.ADVERTISE_ADDR.get(environ)
    if chosen:
        return chosen
    nics = config.GLOO_IFACE.get(environ)
    if nics:
        for nic in nics:
            addr = interface_ipv4(nic)
            if addr:
                return addr
        present = ", ".join(name for _, name in socket.if_nameindex())
        raise ConfigError("none of the network interfaces %s (%s / nics=) has an IPv4 address on host %s; "
                          "its interfaces are: %s"
                          % (list(nics), config.GLOO_IFACE.name, socket.gethostname(), present))
    target = config.RENDEZVOUS_ADDR.get(environ) or "127.0.0.1"
    if target.startswith("127.") or target == "localhost":
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((target, config.RENDEZVOUS_PORT.get(environ) or 1))  # no packet is sent
        return s.getsockname()[0]


# While hvd.init() waits for the other ranks it looks this often whether one of them has exited
# (the launcher notes each rank's exit under exited_scope()), and says every _WAIT_NOTE_S whom it
# still waits for.
_WAIT_SLICE_S = 1.0
_WAIT_NOTE_S = 30.0


def _rank_key(rank: int) -> str:
    """A rank's key in the init and exited scopes."""
    return "rank.%d" % rank


def exited_scope(run_scope: str) -> str:
    """Where a launcher notes ranks whose process ended: key ``rank.<n>``, value the exit code."""
    return run_scope + ".exited"


def note_rank_exit(store, run_scope: str, rank: int, returncode: int) -> None:
    """What a launcher calls (``store``: its KV server or a client) when rank ``rank`` ended."""
    store.put(exited_scope(run_scope), _rank_key(rank), str(int(returncode)).encode())


def _wait_for_ranks(client, scope: str, run_scope: str, ident: Identity, timeout: float, superseded=None):
    keys = [_rank_key(r) for r in range(ident.size)]
    exited = exited_scope(run_scope)
    start = time.monotonic()
    deadline, next_note = start + timeout, start + _WAIT_NOTE_S
    while True:
        try:
            return client.get_many(scope, keys, max(0.0, min(_WAIT_SLICE_S, deadline - time.monotonic())))
        except TimeoutError as exc:
            if superseded is not None:
                why = superseded()
                if why:
                    from horovod_spark.exceptions import HorovodInternalError
                    raise HorovodInternalError(why) from None
            present = set(client.keys(scope))
            missing = [r for r in range(ident.size) if _rank_key(r) not in present]
            gone = set(client.keys(exited)).intersection(_rank_key(r) for r in missing)
            ended = {k: client.get(exited, k, 0.0) for k in gone}
            if ended:
                who = ", ".join("%s (exit code %s)" % (k.replace(".", " "), v.decode())
                                for k, v in sorted(ended.items()))
                raise RuntimeError("hvd.init() on rank %d cannot complete: %s ended without calling hvd.init() "
                                   "(every rank must call hvd.init(), the same number of times)"
                                   % (ident.rank, who)) from None
            now = time.monotonic()
            if now >= deadline:
                raise TimeoutError("hvd.init() waited %.3g s for all %d ranks to start; ranks %s never arrived (%s). "
                                   "A rank failed to start or is stuck before hvd.init(); HOROVOD_START_TIMEOUT "
                                   "raises the limit." % (timeout, ident.size, missing, exc)) from None
            if now >= next_note:
                next_note = now + _WAIT_NOTE_S
                # A warning: with no logging set up in the rank, Python's last-resort handler prints
                # it to the rank's stderr, which the launcher relays to the driver.
                _log.warning("[horovod_spark] hvd.init() on rank %d: still waiting for ranks %s after %.0f s "
                             "(of HOROVOD_START_TIMEOUT=%.0f s)", ident.rank, missing, now - start, timeout)


def exchange_records(ident: Identity, mine: PeerRecord, generation: int, timeout: float,
                     environ=None, superseded=None) -> (List[PeerRecord], str):
    """Every rank's record, by rank, and a token all ranks share (derived from the job secret) that
    the core uses to refuse connections from anything but its peers. Fails fast when a rank the
    others wait for has ended without calling hvd.init(), and says whom it waits for meanwhile.
    ``superseded`` (elastic jobs): called while waiting; a text it returns ends the wait with
    HorovodInternalError."""
    if ident.source == "single":
        return [mine], hashlib.sha256(os.urandom(16)).hexdigest()
    if ident.source == "mpi":
        records = [PeerRecord.decode(b) for b in ident.comm.allgather(mine.encode())]
        token = ident.comm.bcast(hashlib.sha256(os.urandom(32)).hexdigest(), root=0)
        return records, token
    run_scope = config.RUN_SCOPE.get(environ)
    scope = "%s.init.%d" % (run_scope, generation)
    client = KVClient.from_env(environ)
    try:
        client.put(scope, _rank_key(ident.rank), mine.encode())
        values = _wait_for_ranks(client, scope, run_scope, ident, timeout, superseded)
    finally:
        client.close()
    records = [PeerRecord.decode(values[_rank_key(r)]) for r in range(ident.size)]
    secret = config.SECRET_KEY.require(environ)
    token = hashlib.sha256(secret + scope.encode()).hexdigest()
    return records, token


def placement(records: List[PeerRecord], rank: int):
    """(local_rank, local_size, cross_rank, cross_size) from who shares a host, as Horovod defines
    them: local among ranks on my host; cross among ranks with my local_rank, hosts in rank order."""
    me = records[rank]
    local = [r.rank for r in records if r.host_id == me.host_id]
    local_rank = local.index(rank)
    hosts: List[str] = []
    for r in records:
        if r.host_id not in hosts:
            hosts.append(r.host_id)
    by_host = {h: [r.rank for r in records if r.host_id == h] for h in hosts}
    cross = [by_host[h][local_rank] for h in hosts if len(by_host[h]) > local_rank]
    return local_rank, len(local), cross.index(rank), len(cross)
