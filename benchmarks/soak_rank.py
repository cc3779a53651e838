"""What each rank of the soak runs: the schedule of soak_plan, through the core's Python API
(horovod_spark.common.ops and process_sets), every result checked exactly, and the process's
resident memory and open file descriptors recorded at each checkpoint."""
import collections
import ctypes
import gc
import os
import random
import sys
import time

import numpy as np
import soak_plan as plan
import soak_values as sv

WAIT_TIMEOUT = 120.0  # seconds one collective may take before the soak calls it a hang
MAX_FAILURES = 30


def memory_kib() -> dict:
    """Resident memory from /proc/self/status: VmRSS and its parts RssAnon, RssFile, RssShmem."""
    fields = {"VmRSS:": "rss", "RssAnon:": "anon", "RssFile:": "file", "RssShmem:": "shmem"}
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(None, 1)[0]
            if key in fields:
                out[fields[key]] = int(line.split()[1])
    if len(out) != len(fields):
        raise RuntimeError("/proc/self/status lacks some of %s" % ", ".join(fields))
    return out


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) - 1  # less the descriptor listdir itself holds


def _settle_memory():
    """Bring the process to a state where RSS counts live memory only: collect cycles, fill
    numpy's cache of small data blocks (it keeps up to 7 freed blocks of each size under 1 KiB,
    about 3.6 MiB when full; it fills as arrays of new sizes come and go, which would read as slow
    growth), and hand freed heap memory back to the kernel (glibc keeps it for reuse otherwise)."""
    gc.collect()
    held = [np.empty(size, np.uint8) for size in range(1, 1024) for _ in range(7)]
    del held
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _bits(a):
    a = np.ascontiguousarray(a).reshape(-1)
    return a.view(np.dtype("u%d" % a.dtype.itemsize))


def mismatch(got, want, dtype):
    """None when ``got`` equals ``want`` bit for bit (floats included: the reference is exact), else
    what differs."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return "shape %s, expected %s" % (got.shape, want.shape)
    g, w = _bits(got), _bits(want)
    if g.dtype != w.dtype:
        return "element size %d, expected %d" % (g.dtype.itemsize, w.dtype.itemsize)
    bad = np.flatnonzero(g != w)
    if bad.size == 0:
        return None
    i = int(bad[0])
    return "%d of %d elements differ; first at %d: got %s, expected %s" % (
        bad.size, g.size, i, sv.show(got.reshape(-1)[i:i + 4], dtype), sv.show(want.reshape(-1)[i:i + 4], dtype))


class RankSoak:
    def __init__(self, seed, count, max_bytes, warmup, tag):
        from horovod_spark.common import basics
        self.rank, self.size = basics.rank(), basics.size()
        self.planner = plan.Planner(seed, self.size, count, max_bytes, warmup, basics.config()["cache_capacity"],
                                    tag=tag)
        self.order_rng = random.Random("%d.%d" % (seed, self.rank))  # this rank's own submission/wait orders
        self.sets = {}
        self.kinds = collections.Counter()
        self.failures = []
        self.checkpoints = []

    # ---- reporting
    def fail(self, c, what):
        if len(self.failures) < MAX_FAILURES:
            self.failures.append("rank %d: %s '%s' (%s %s op=%s pre=%g post=%g shapes=%s set=%s): %s" % (
                self.rank, c.kind, c.name, c.dtype, c.form, c.op, c.prescale, c.postscale, c.shapes[:3],
                c.members, what))

    def same(self, c, got, want, label=""):
        problem = mismatch(got, want, c.dtype)
        if problem:
            self.fail(c, label + problem)

    # ---- one collective: submit, then finish
    def submit(self, c):
        from horovod_spark.common import ops
        me = c.members.index(self.rank)
        psid = 0 if c.slot is None else self.sets[c.slot].process_set_id
        dtype = c.dtype
        if c.kind == "barrier":
            return ops.barrier_async(psid), None
        if c.kind == "grouped_allreduce":
            ins = [plan.rank_input(c, me, part) for part in range(len(c.shapes))]
            outs = ins if c.in_place else [np.full_like(x, 0x5A if dtype != "bool" else 0) for x in ins]
            h = ops.grouped_allreduce_async(c.name, [x.ctypes.data for x in ins], [o.ctypes.data for o in outs],
                                            dtype, [x.shape for x in ins], getattr(ops, c.op), c.prescale,
                                            c.postscale, psid)
            return h, (ins, outs)
        x = plan.rank_input(c, me)
        if c.kind in ("allreduce", "broadcast"):
            out = x if c.in_place else np.full_like(x, 0x5A if dtype != "bool" else 0)
            if c.kind == "broadcast":
                h = ops.broadcast_async(c.name, x.ctypes.data, out.ctypes.data, dtype, x.shape, c.root, psid)
                return h, (x, out)
            if c.form == "blocking":
                ops.allreduce(c.name, x.ctypes.data, out.ctypes.data, dtype, x.shape, getattr(ops, c.op), c.prescale,
                              c.postscale, psid)
                return None, (x, out)
            return ops.allreduce_async(c.name, x.ctypes.data, out.ctypes.data, dtype, x.shape, getattr(ops, c.op),
                                       c.prescale, c.postscale, psid), (x, out)
        if c.kind == "allgather":
            return ops.allgather_async(c.name, x.ctypes.data, dtype, x.shape, psid), x
        if c.kind == "alltoall":
            return ops.alltoall_async(c.name, x.ctypes.data, dtype, x.shape, c.splits[me], psid), x
        if c.kind == "reducescatter":
            return ops.reducescatter_async(c.name, x.ctypes.data, dtype, x.shape, getattr(ops, c.op), c.prescale,
                                           c.postscale, psid), x
        raise ValueError(c.kind)

    def finish(self, c, handle, keep):
        from horovod_spark.common import ops
        if handle is not None and c.form == "poll":
            deadline = time.monotonic() + WAIT_TIMEOUT
            while not ops.poll(handle):
                if time.monotonic() > deadline:
                    raise TimeoutError("rank %d: %s '%s' still not done after %.0f s of polling"
                                       % (self.rank, c.kind, c.name, WAIT_TIMEOUT))
                time.sleep(0)
        result = ops.wait(handle, timeout=WAIT_TIMEOUT) if handle is not None else None
        self.kinds[c.kind] += 1
        if c.kind == "barrier":
            return
        me = c.members.index(self.rank)
        storage = sv.storage(c.dtype)
        want = plan.expected(c, me)
        if c.kind in ("allreduce", "broadcast"):
            self.same(c, keep[1], want)
        elif c.kind == "grouped_allreduce":
            for part, (out, w) in enumerate(zip(keep[1], want)):
                self.same(c, out, w, "member %d: " % part)
        elif c.kind in ("allgather", "reducescatter"):
            raw, shape = result
            if tuple(shape) != tuple(want[1]):
                return self.fail(c, "result shape %s, expected %s" % (shape, want[1]))
            self.same(c, raw.view(storage).reshape(shape), want[0])
        elif c.kind == "alltoall":
            raw, shape, recv = result if len(result) == 3 else result + ([],)
            if tuple(shape) != tuple(want[1]) or list(recv) != want[2]:
                return self.fail(c, "result shape %s splits %s, expected %s %s" % (shape, recv, want[1], want[2]))
            self.same(c, raw.view(storage).reshape(shape), want[0])

    # ---- events
    def run_batch(self, batch):
        mine = [c for c in batch.ops if self.rank in (c.active if c.active is not None else c.members)]
        blocking = [c for c in mine if c.form == "blocking"]
        rest = [c for c in mine if c.form != "blocking"]
        self.order_rng.shuffle(rest)
        if batch.stagger:
            time.sleep(0.05 * (self.rank if batch.stagger > 0 else self.size - 1 - self.rank))
        # The blocking call goes last, after every asynchronous submission of the batch.
        submitted = [(c,) + self.submit(c) for c in rest + blocking]
        self.order_rng.shuffle(submitted)
        for c, handle, keep in submitted:
            self.finish(c, handle, keep)

    def run_join(self, event):
        from horovod_spark.common import ops
        if self.rank in event.late:
            for batch in event.batches:
                self.run_batch(batch)
        last = ops.wait(ops.join_async(), timeout=WAIT_TIMEOUT)
        self.kinds["join"] += 1
        allowed = event.late if event.late else tuple(range(self.size))
        if len(event.late) == 1 and last != event.late[0] or last not in allowed:
            self.failures.append("rank %d: join returned last rank %r, expected %s" % (
                self.rank, last, event.late[0] if len(event.late) == 1 else "one of %s" % (allowed,)))

    def checkpoint(self, label):
        _settle_memory()
        # py_blocks: blocks held by Python's object allocator, to tell Python objects from the rest
        self.checkpoints.append(dict(label=label, ops=self.planner.done, fds=open_fds(), t=time.perf_counter(),
                                     py_blocks=sys.getallocatedblocks(), **memory_kib()))

    def run(self):
        from horovod_spark.common import process_sets
        self.checkpoint("start")
        for event in self.planner.events():
            if isinstance(event, plan.Batch):
                self.run_batch(event)
            elif isinstance(event, plan.AddSet):
                self.sets[event.slot] = process_sets.add_process_set(list(event.ranks))
                self.kinds["add_process_set"] += 1
            elif isinstance(event, plan.RemoveSet):
                if not process_sets.remove_process_set(self.sets.pop(event.slot)):
                    self.failures.append("rank %d: remove_process_set returned False" % self.rank)
                self.kinds["remove_process_set"] += 1
            elif isinstance(event, plan.Join):
                self.run_join(event)
            elif isinstance(event, plan.Checkpoint):
                self.checkpoint(event.label)


def soak_rank(seed, count, max_bytes, warmup, tag):
    """One rank's soak (the function run_local ships to every rank): returns its report."""
    from horovod_spark.common import _core, basics, ops
    basics.init()
    start = time.perf_counter()
    soak = RankSoak(seed, count, max_bytes, warmup, tag)
    soak.run()
    wall = time.perf_counter() - start
    stats = dict(_core.stats())
    ops.wait(ops.barrier_async(), timeout=WAIT_TIMEOUT)
    basics.shutdown()
    return dict(rank=soak.rank, kinds=dict(soak.kinds), failures=soak.failures, checkpoints=soak.checkpoints,
                wall_s=wall, stats=stats, ops=soak.planner.done, scheduled=soak.planner.scheduled,
                warmup=soak.planner.warmup)
