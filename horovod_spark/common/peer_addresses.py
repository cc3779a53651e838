"""Which of a peer's addresses a rank connects to.

A host often has several interfaces and only some reach the other hosts (a management NIC, a
container bridge, a second subnet). So each rank publishes every address it could be reached at,
best guess first, and before the core connects, each rank probes every other host's candidates in
that order and keeps the first one whose host answers a TCP connection (the peer's core listens
on all interfaces; a refusal, once it closed its port, answers as well). Ranks of the same host
are reached at that host's first candidate. When a host cannot be reached at any candidate within
the start timeout, ``hvd.init()`` fails naming the hosts and the interfaces it tried.
"""
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Optional, Tuple

from horovod_spark.common import config

# Each probe gives up after this long (a firewall that drops SYNs answers nothing at all); failed
# hosts are probed again every _PROBE_RETRY_S until the start timeout.
_PROBE_TIMEOUT_S = 2.0
_PROBE_RETRY_S = 0.25


def interface_addresses() -> List[Tuple[str, str]]:
    """(IPv4 address, interface) for every interface of this host that has one, loopback last."""
    from horovod_spark.common.rendezvous import interface_ipv4
    found = []
    for _, name in socket.if_nameindex():
        addr = interface_ipv4(name)
        if addr:
            found.append((addr, name))
    return sorted(found, key=lambda a: a[0].startswith("127."))


def candidates(environ=None) -> List[Tuple[str, str]]:
    """The (address, interface) pairs this rank publishes, best first: the one HOROVOD_ADVERTISE_ADDR
    names; else those of the interfaces in HOROVOD_GLOO_IFACE, in its order; else the address that
    routes to the rendezvous service, then this host's other non-loopback addresses."""
    from horovod_spark.common.rendezvous import advertised_address
    first = advertised_address(environ)
    if config.ADVERTISE_ADDR.get(environ):
        return [(first, config.ADVERTISE_ADDR.name)]
    own = interface_addresses()
    nics = config.GLOO_IFACE.get(environ)
    if nics:
        by_name = {name: addr for addr, name in own}
        return [(by_name[n], n) for n in nics if n in by_name]
    if first.startswith("127."):
        return [(first, "lo")]
    name_of = {addr: name for addr, name in own}
    rest = [(addr, name) for addr, name in own if addr != first and not addr.startswith("127.")]
    return [(first, name_of.get(first, "?"))] + rest


def _probe(addr: str, port: int, timeout: float) -> Optional[str]:
    """None when the host answers a TCP connection to addr:port, else why not. A refusal is an
    answer too: the peer's core closes its listening socket as soon as its own connections are
    made, so the port may be shut while the address is the right one."""
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return None
    except ConnectionRefusedError:
        return None
    except OSError as exc:
        return exc.strerror or str(exc)


def _reach(cands: List[Tuple[str, str]], port: int, deadline: float) -> Tuple[Optional[str], Dict[str, str]]:
    """The first candidate that answers, trying all of them until ``deadline``; else the errors."""
    errors: Dict[str, str] = {}
    # Another host's address that this host has too (a container bridge's 172.17.0.1 on every
    # machine) would answer from here without reaching that host: try those last. (Loopback keeps
    # its place: "hosts" told apart by HOROVOD_HOSTNAME on one machine publish only that.)
    own = {addr for addr, _ in interface_addresses() if not addr.startswith("127.")}
    cands = [c for c in cands if c[0] not in own] + [c for c in cands if c[0] in own]
    while True:
        for addr, nic in cands:
            left = deadline - time.monotonic()
            why = _probe(addr, port, max(0.05, min(_PROBE_TIMEOUT_S, left)))
            if why is None:
                return addr, errors
            errors["%s (%s)" % (addr, nic)] = why
        if time.monotonic() + _PROBE_RETRY_S >= deadline:
            return None, errors
        time.sleep(_PROBE_RETRY_S)


def choose(records, rank: int, timeout: float, environ=None):
    """``records`` with each other host's ranks' ``host`` set to the first of that host's candidates
    this rank reaches; raises ConnectionError naming every unreachable host and what was tried."""
    me = records[rank]
    hosts: Dict[str, list] = {}
    for r in records:
        if r.host_id != me.host_id:
            hosts.setdefault(r.host_id, []).append(r)
    if not hosts:
        return records
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        futures = {h: pool.submit(_reach, [tuple(c) for c in rs[0].candidates] or [(rs[0].host, "?")],
                                  rs[0].port, deadline) for h, rs in hosts.items()}
        outcome = {h: f.result() for h, f in futures.items()}
    failed = {h: errors for h, (addr, errors) in outcome.items() if addr is None}
    if failed:
        raise ConnectionError(_unreachable_message(rank, me.host_id, hosts, failed, timeout, environ))
    chosen = {h: addr for h, (addr, _) in outcome.items()}
    # Every rank of a host listens on all of its interfaces: the address that reached one reaches all.
    return [r if r.host_id == me.host_id else r.with_host(chosen[r.host_id]) for r in records]


def _unreachable_message(rank, my_host, hosts, failed, timeout, environ) -> str:
    lines = []
    for h, errors in sorted(failed.items()):
        ranks = ", ".join(str(r.rank) for r in hosts[h])
        tried = "; ".join("%s: %s" % kv for kv in errors.items()) or "no address published"
        lines.append("host %s (ranks %s): tried %s" % (h, ranks, tried))
    nics = config.GLOO_IFACE.get(environ)
    hint = ("the interfaces came from %s=%s (nics= of horovod_spark.run); name interfaces that reach the other "
            "hosts" % (config.GLOO_IFACE.name, ",".join(nics)) if nics else
            "name the interface that reaches the other hosts with nics= of horovod_spark.run or %s"
            % config.GLOO_IFACE.name)
    return ("hvd.init() on rank %d (host %s) cannot reach %d other host(s) within %.3g s (HOROVOD_START_TIMEOUT):\n"
            "  %s\n%s." % (rank, my_host, len(failed), timeout, "\n  ".join(lines), hint[0].upper() + hint[1:]))
