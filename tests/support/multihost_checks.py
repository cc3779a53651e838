"""Rank-side checks for multi-host runs: what each rank sees of its placement, its links and every
collective, computed so that the expected values follow from rank and size alone (exact).

Runs inside ranks (Spark tasks or launcher processes); the test compares the returned dicts.
"""
import os
import socket


def _socket_inodes():
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _hex_ip(text):
    return socket.inet_ntoa(bytes.fromhex(text)[::-1])


def established_peers_by_ip():
    """{remote IPv4: number of this process's established TCP connections to it}."""
    mine = _socket_inodes()
    counts = {}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            cols = line.split()
            if cols[3] != "01" or cols[9] not in mine:  # 01: ESTABLISHED
                continue
            ip = _hex_ip(cols[2].split(":")[0])
            counts[ip] = counts.get(ip, 0) + 1
    return counts


def shared_memory_mapped():
    """Whether this process maps one of the core's shared-memory segments."""
    with open("/proc/self/maps") as f:
        return any("/hs-" in line for line in f)


def placement_and_links():
    """Placement as the core sees it, and the links it really holds: call after hvd.init()."""
    import horovod_spark.torch as hvd
    return {"rank": hvd.rank(), "size": hvd.size(), "host": socket.gethostname(),
            "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
            "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size(),
            "tcp_by_ip": established_peers_by_ip(), "shm": shared_memory_mapped()}


def collectives():
    """Every collective, process sets and join; returns {check name: True or a description of the
    mismatch} so one run reports every failure at once."""
    import torch

    import horovod_spark.torch as hvd
    r, n = hvd.rank(), hvd.size()
    out = {}

    def check(name, got, want):
        ok = torch.equal(got, want)
        out[name] = True if ok else "rank %d: got %s, want %s" % (r, got.tolist(), want.tolist())

    x = torch.arange(1000, dtype=torch.float64) * (r + 1)
    check("allreduce_sum", hvd.allreduce(x, op=hvd.Sum), torch.arange(1000, dtype=torch.float64) * n * (n + 1) / 2)
    big = torch.full((3 << 20,), float(r), dtype=torch.float32)  # several fusion and TCP chunks
    check("allreduce_large", hvd.allreduce(big, op=hvd.Sum), torch.full((3 << 20,), n * (n - 1) / 2.0))
    check("allreduce_max", hvd.allreduce(torch.tensor([r, -r], dtype=torch.int64), op=hvd.Max),
          torch.tensor([n - 1, 0]))
    mine = torch.full((r + 1, 2), r, dtype=torch.int32)
    want = torch.cat([torch.full((k + 1, 2), k, dtype=torch.int32) for k in range(n)])
    check("allgather_uneven", hvd.allgather(mine), want)
    check("broadcast", hvd.broadcast(torch.tensor([float(r)] * 5), root_rank=n - 2), torch.tensor([float(n - 2)] * 5))
    # Rank r sends j+1 rows of value 100*r + j to rank j.
    rows = torch.cat([torch.full((j + 1,), 100 * r + j, dtype=torch.int64) for j in range(n)])
    got, splits = hvd.alltoall(rows, splits=torch.tensor([j + 1 for j in range(n)], dtype=torch.int32))
    check("alltoall", got, torch.cat([torch.full((r + 1,), 100 * k + r, dtype=torch.int64) for k in range(n)]))
    check("alltoall_splits", splits.to(torch.int64), torch.full((n,), r + 1, dtype=torch.int64))
    rs_in = torch.arange(2 * n, dtype=torch.float32).repeat(3, 1).t().contiguous() + r
    check("reducescatter", hvd.reducescatter(rs_in, op=hvd.Sum),
          (torch.arange(2 * n, dtype=torch.float32).repeat(3, 1).t() * n + n * (n - 1) / 2)[2 * r:2 * r + 2])

    # A set with one rank per host (all TCP) and the ranks on rank 0's host (all shared memory).
    hosts = hvd.allgather_object(socket.gethostname())
    firsts = [k for k in range(n) if hosts.index(hosts[k]) == k]
    cross = hvd.add_process_set(firsts)
    same_host = hvd.add_process_set([k for k in range(n) if hosts[k] == hosts[0]])
    if r in cross.ranks:
        check("process_set_cross", hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum, process_set=cross),
              torch.tensor([float(sum(cross.ranks))]))
    if r in same_host.ranks:
        check("process_set_same_host", hvd.allgather(torch.tensor([r]), process_set=same_host),
              torch.tensor(same_host.ranks))
    hvd.remove_process_set(cross)
    hvd.remove_process_set(same_host)

    # Rank r runs r+1 steps, then joins: in step k the n-k ranks still running contribute 1.
    for k in range(r + 1):
        check("join_step_%d" % k, hvd.allreduce(torch.ones(4), op=hvd.Sum, name="join.%d" % k),
              torch.full((4,), float(n - k)))
    out["join_last"] = True if hvd.join() == n - 1 else "rank %d: join did not return %d" % (r, n - 1)
    return out

