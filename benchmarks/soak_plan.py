"""The soak's schedule: a deterministic stream of mixed collectives and control events, the same on
every rank for the same seed, and the value each rank must see from each collective.

Each collective's inputs come from a generator seeded by (seed, the collective's index, the
contributing rank, the group member), so any rank can rebuild every rank's input and check its own
result exactly, with no extra communication.
"""
import dataclasses
from typing import List, Optional, Tuple

import numpy as np
import soak_values as sv

KINDS = ("allreduce", "grouped_allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "barrier")
_KIND_WEIGHTS = (40, 5, 12, 12, 10, 12, 4)
REDUCE_OPS = ("Average", "Sum", "Min", "Max", "Product")
_SCALES = (1.0, 1.0, 1.0, 0.5, 2.0)
MAX_SETS = 3
POOL_SIZE = 24  # allreduce names that recur (the response cache's steady state)
# run while ranks joined: as in Horovod, allgather and broadcast are refused then (tests/frameworks cover that)
JOINABLE = ("allreduce", "grouped_allreduce", "reducescatter")
JOIN_MAX_BYTES = 1 << 20  # the largest op while ranks have joined
TOUR_OPS = len(KINDS) + len(JOINABLE) + 3  # collectives in Planner.tour(): add, remove and join count one each


@dataclasses.dataclass
class Collective:
    seed: int
    index: int
    kind: str
    name: str
    dtype: str = "uint8"
    members: Tuple[int, ...] = ()  # global ranks in set-rank order
    shapes: list = dataclasses.field(default_factory=list)  # per member; grouped: the members' shapes
    slot: Optional[int] = None  # process-set slot; None: the global set
    op: str = "Sum"
    prescale: float = 1.0
    postscale: float = 1.0
    root: int = 0  # broadcast: a set rank
    splits: Optional[list] = None  # alltoall: per member, its splits (None: equal parts)
    in_place: bool = False
    form: str = "async"  # async | poll | blocking
    active: Optional[Tuple[int, ...]] = None  # join episodes: the ranks that have not joined

    def contributors(self) -> List[int]:
        """Set ranks whose inputs reach the result."""
        if self.active is None:
            return list(range(len(self.members)))
        return [q for q, g in enumerate(self.members) if g in self.active]


@dataclasses.dataclass
class Batch:
    ops: List[Collective]
    # 1 (-1): ranks submit in ascending (descending) order, some milliseconds apart, and then
    # wait; each waits before the last one submits, so its waiting thread, not its engine thread,
    # is the one that finds the negotiated op and runs it. 0: at once.
    stagger: int = 0


@dataclasses.dataclass
class AddSet:
    slot: int
    ranks: Tuple[int, ...]


@dataclasses.dataclass
class RemoveSet:
    slot: int


@dataclasses.dataclass
class Join:
    late: Tuple[int, ...]  # ranks that run the extra batches before they join
    batches: List[Batch]


@dataclasses.dataclass
class Checkpoint:
    label: str


def reducescatter_sweep(max_bytes, n):
    """float32 shapes from max_bytes down by factors of 1.5 to 64 KiB, each 1-D and as rows of two
    whose count leaves each remainder mod n. The ring reducescatter of T bytes keeps its partial
    sums at [0, T/6) and [T/3, T/2) of a per-thread buffer the core keeps (on 3 ranks, the soak's
    default), and a rank whose rows do not line up with the ring's even split keeps its piece at
    [2T/3, T); sizes T, 2T/3, 4T/9 ... cover all of it between them, so that no later op touches a
    page of that buffer for the first time."""
    shapes, size = [], max_bytes
    while size >= 64 << 10:
        elements = size // 4
        shapes.append((elements,))
        shapes += [(elements // 2 // n * n + j, 2) for j in range(1, n)]
        size = size * 2 // 3
    return shapes


# ------------------------------------------------------------------------------------- inputs

def _value_range(dtype, op):
    if dtype == "bool":
        return 0, 1
    if op == "Product":
        return (0, 3) if dtype in sv.UNSIGNED else (-2, 2)
    # |x| <= 5 (10 unsigned), prescale 2, three ranks, postscale 2: at most 120 (60), exact everywhere
    return (0, 10) if dtype in sv.UNSIGNED else (-5, 5)


def rank_input(c: Collective, q: int, part: int = 0) -> np.ndarray:
    """Set rank ``q``'s input (storage array) to ``c``; ``part``: the member of a group."""
    shape = c.shapes[part] if c.kind == "grouped_allreduce" else c.shapes[q]
    rng = np.random.default_rng([c.seed, c.index, q, part])
    lo, hi = _value_range(c.dtype, c.op)
    raw = rng.integers(lo, hi + 1, int(np.prod(shape, dtype=np.int64)), dtype=np.int8)
    return sv.encode_small_ints(raw, c.dtype).reshape(shape)


# ------------------------------------------------------------------------------ expected values

def _reduced(c: Collective, part: int = 0) -> np.ndarray:
    """Storage array: the full reduction of every contributor's input (non-contributors add zeros)."""
    vals = [sv.scale(sv.decode(rank_input(c, q, part), c.dtype), c.dtype, c.prescale) for q in c.contributors()]
    if len(vals) < len(c.members):  # ranks that joined contribute zeros
        vals.append(np.zeros_like(vals[0]))
    op = "Sum" if c.op == "Average" else c.op
    total = sv.reduce(vals, op, c.dtype)
    sv.encode(total, c.dtype)  # the reduction before the postscale is exact too
    factor = c.postscale / len(c.members) if c.op == "Average" else c.postscale
    return sv.encode(sv.scale(total, c.dtype, factor), c.dtype)


def _rows(shape):
    return 1 if len(shape) == 0 else shape[0]


def _rest(shape):
    return tuple(shape[1:])


def scatter_rows(dim0, n, q):
    return dim0 // n + (1 if q < dim0 % n else 0)


def expected(c: Collective, me: int):
    """What set rank ``me`` must get: a storage array (allreduce, broadcast), a list of them
    (grouped), (array, shape) for allgather/reducescatter, (array, shape, splits) for alltoall."""
    if c.kind == "allreduce":
        return _reduced(c)
    if c.kind == "grouped_allreduce":
        return [_reduced(c, part) for part in range(len(c.shapes))]
    if c.kind == "broadcast":
        return rank_input(c, c.root)
    if c.kind == "allgather":
        parts = [rank_input(c, q).reshape((_rows(c.shapes[q]),) + _rest(c.shapes[q])) for q in c.contributors()]
        out = np.concatenate(parts)
        return out, out.shape
    if c.kind == "reducescatter":
        full = _reduced(c).reshape((_rows(c.shapes[me]),) + _rest(c.shapes[me]))
        n = len(c.members)
        start = sum(scatter_rows(len(full), n, q) for q in range(me))
        out = full[start:start + scatter_rows(len(full), n, me)]
        return out, out.shape
    if c.kind == "alltoall":
        parts, recv = [], []
        for q in range(len(c.members)):
            x = rank_input(c, q)
            splits = alltoall_splits(c, q)
            offs = np.cumsum([0] + splits)
            parts.append(x[offs[me]:offs[me + 1]])
            recv.append(splits[me])
        out = np.concatenate(parts)
        return out, out.shape, recv
    raise ValueError("no expected value for %s" % c.kind)


def alltoall_splits(c: Collective, q: int) -> List[int]:
    if c.splits is not None and c.splits[q] is not None:
        return list(c.splits[q])
    n = len(c.members)
    return [_rows(c.shapes[q]) // n] * n


# ------------------------------------------------------------------------------------ the plan

class Planner:
    """Generates the events of one launch of ``count`` collectives on ``size`` ranks. Adding and
    removing a process set and each join count as one collective each. Warm-up is the prelude
    (see there) and then ``warmup`` mixed collectives. ``cache_capacity``: the core's
    response-cache capacity (HOROVOD_CACHE_CAPACITY), which the prelude fills."""

    def __init__(self, seed: int, size: int, count: int, max_bytes: int, warmup: int, cache_capacity: int,
                 checkpoints: int = 10, tag: str = "s"):
        self.seed, self.size, self.count, self.max_bytes = seed, size, count, max_bytes
        self.cache_capacity, self.tag = cache_capacity, tag
        self.rng = np.random.default_rng([seed, 1])
        self.done = 0
        self.index = 0
        self.sets = {}  # slot -> ranks
        self.next_slot = 0
        self.pool = {}  # pool id -> template Collective (dtype, shape, op, scales)
        self.scheduled = {}  # collectives by kind, each counted once whoever takes part
        if count < self.prelude_count() + warmup + 10:
            raise ValueError("a launch of %d collectives is too short: warm-up alone takes %d (%d largest ops, %d in "
                             "the tour, %d distinct names to fill the response cache, %d mixed); give a larger "
                             "count, or a smaller HOROVOD_CACHE_CAPACITY or max_bytes"
                             % (count, self.prelude_count() + warmup, self.largest_ops(), TOUR_OPS,
                                self.cache_fill(), warmup))
        self.warmup = self.prelude_count() + warmup
        step = max(1, (count - self.warmup) // max(1, checkpoints))
        self.marks = [m for m in range(self.warmup + step, count, step)][:checkpoints - 1]

    def cache_fill(self):
        """Distinct names that fill the response cache, and some more: its entries are memory that
        grows until the cache is full, and must be in place before the flat phase is measured."""
        return self.cache_capacity + 64 if self.cache_capacity > 0 else 0

    def prelude_count(self):
        return self.largest_ops() + TOUR_OPS + self.cache_fill()

    def largest_ops(self):
        """Collectives in the prelude's largest ops (see there)."""
        return 2 * 9 + 3 * (1 + len(reducescatter_sweep(self.max_bytes, self.size))) + 7

    # ---- helpers
    def _new(self, kind, members, slot, **fields) -> Collective:
        self.index += 1
        name = fields.pop("name", None) or "%s.%d.%s" % (self.tag, self.index, kind)
        return Collective(seed=self.seed, index=self.index, kind=kind, name=name, members=tuple(members),
                          slot=slot, **fields)

    def _pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def _nbytes(self):
        u = self.rng.random()
        lo, hi = (1, 4 << 10) if u < 0.80 else (4 << 10, 256 << 10) if u < 0.95 else \
                 (256 << 10, 2 << 20) if u < 0.99 else (2 << 20, self.max_bytes)
        hi = max(1, min(hi, self.max_bytes))
        lo = min(lo, hi)
        return int(np.exp(self.rng.uniform(np.log(lo), np.log(hi + 1))))

    def _shape(self, count):
        """A shape of about ``count`` elements: mostly 1-D, some 2-D, rarely a scalar or empty."""
        u = self.rng.random()
        if u < 0.02:
            return ()
        if u < 0.03:
            return (0,)
        if u < 0.30 and count >= 4:
            cols = self._pick((2, 3, 4, 7))
            return (count // cols, cols)
        return (count,)

    def _elements(self, dtype, nbytes):
        return max(1, nbytes // sv.storage(dtype).itemsize)

    def _reduction_fields(self, dtype):
        ops = REDUCE_OPS[1:] if dtype == "bool" else REDUCE_OPS
        op = self._pick(ops)
        if dtype == "bool":
            return dict(op=op)
        pre = self._pick((1.0, 1.0, 0.5)) if op == "Product" else self._pick(_SCALES)
        return dict(op=op, prescale=pre, postscale=self._pick(_SCALES))

    # ---- one collective
    def collective(self, kind, members, slot, nbytes, active=None, joinable=False) -> Collective:
        n = len(members)
        dtype = self._pick(sv.DTYPES)
        if kind == "barrier":
            return self._new("barrier", members, slot, active=active)
        count = self._elements(dtype, nbytes)
        fields = dict(dtype=dtype, active=active)
        if kind in ("allreduce", "grouped_allreduce", "reducescatter"):
            fields.update(self._reduction_fields(dtype))
            if joinable:
                fields.update(op=self._pick(("Sum", "Average")) if dtype != "bool" else "Sum")
        if kind == "allreduce":
            shape = self._shape(count)
            return self._new(kind, members, slot, shapes=[shape] * n, in_place=bool(self.rng.random() < 0.5),
                             **fields)
        if kind == "grouped_allreduce":
            parts = int(self.rng.integers(1, 6))
            shapes = [self._shape(max(1, count // parts)) for _ in range(parts)]
            return self._new(kind, members, slot, shapes=shapes, in_place=bool(self.rng.random() < 0.5), **fields)
        if kind == "broadcast":
            shape = self._shape(count)
            roots = [q for q, g in enumerate(members) if active is None or g in active]
            return self._new(kind, members, slot, shapes=[shape] * n, root=self._pick(roots),
                             in_place=bool(self.rng.random() < 0.5), **fields)
        if kind == "reducescatter":
            shape = self._shape(count) or (1,)  # as in Horovod, a scalar cannot be scattered
            return self._new(kind, members, slot, shapes=[shape] * n, **fields)
        shape = self._shape(count)
        rest = shape[1:]
        row = int(np.prod(rest, dtype=np.int64)) if rest else 1
        max_rows = max(0, count // max(1, row))
        if kind == "allgather":
            if shape == ():
                return self._new(kind, members, slot, shapes=[()] * n, **fields)
            shapes = [(int(self.rng.integers(0, max_rows + 1)),) + rest for _ in range(n)]
            return self._new(kind, members, slot, shapes=shapes, **fields)
        # alltoall: each rank its own first dimension; splits given, or equal parts (None)
        shapes, splits = [], []
        for _ in range(n):
            if self.rng.random() < 0.25:
                rows = n * int(self.rng.integers(0, max_rows // n + 1))
                shapes.append((rows,) + rest)
                splits.append(None)
            else:
                rows = int(self.rng.integers(0, max_rows + 1))
                cuts = np.sort(self.rng.integers(0, rows + 1, n - 1))
                shapes.append((rows,) + rest)
                splits.append(np.diff(np.concatenate([[0], cuts, [rows]])).astype(int).tolist())
        return self._new(kind, members, slot, shapes=shapes, splits=splits, **fields)

    def _pooled_allreduce(self, taken) -> Optional[Collective]:
        free = [k for k in range(POOL_SIZE) if k not in taken]
        if not free:
            return None
        k = self._pick(free)
        taken.add(k)
        template = self.pool.get(k)
        if template is None or self.rng.random() < 0.01:  # now and then a name changes signature
            template = self.collective("allreduce", tuple(range(self.size)), None, min(self._nbytes(), 64 << 10))
            self.pool[k] = template
        return self._new("allreduce", template.members, None, name="%s.pool.%d" % (self.tag, k), dtype=template.dtype,
                         shapes=template.shapes, op=template.op, prescale=template.prescale,
                         postscale=template.postscale, in_place=template.in_place)

    def batch(self, room) -> Batch:
        u = self.rng.random()
        k = 1 if u < 0.55 else int(self.rng.integers(2, 7)) if u < 0.90 else int(self.rng.integers(7, 25))
        k = min(k, room)
        ops, budget, pooled, barriers = [], 2 * self.max_bytes, set(), set()
        everyone = tuple(range(self.size))
        while len(ops) < k:
            kind = KINDS[int(self.rng.choice(len(KINDS), p=np.array(_KIND_WEIGHTS) / sum(_KIND_WEIGHTS)))]
            slot = None
            if self.sets and self.rng.random() < 0.25:
                slot = self._pick(sorted(self.sets))
            members = self.sets[slot] if slot is not None else everyone
            if kind == "barrier":
                if slot in barriers:
                    continue
                barriers.add(slot)
            if kind == "allreduce" and slot is None and self.rng.random() < 0.3:
                c = self._pooled_allreduce(pooled)
                if c is not None:
                    ops.append(c)
                    continue
            nbytes = self._nbytes()
            if nbytes > budget:
                nbytes = min(nbytes, 4096)
            budget -= nbytes
            ops.append(self.collective(kind, members, slot, nbytes))
        # At most one blocking call per batch: each rank submits everything else of the batch
        # before it blocks, so the blocking call always finds its peers.
        allreduces = [c for c in ops if c.kind == "allreduce"]
        if allreduces and self.rng.random() < 0.4:
            self._pick(allreduces).form = "blocking"
        for c in ops:
            if c.form == "async" and self.rng.random() < 0.15:
                c.form = "poll"
        return Batch(ops)

    def join(self, room) -> Join:
        late = tuple(q for q in range(self.size) if self.rng.random() < 0.4)
        if len(late) == self.size:
            late = late[:1]
        batches, used = [], 1
        everyone = tuple(range(self.size))
        if late:
            for _ in range(int(self.rng.integers(1, 4))):
                ops = []
                for _ in range(int(self.rng.integers(1, 4))):
                    if used >= room:
                        break
                    kind = self._pick(("allreduce",) + JOINABLE)
                    ops.append(self.collective(kind, everyone, None, min(self._nbytes(), JOIN_MAX_BYTES), active=late,
                                               joinable=True))
                    used += 1
                if ops:
                    batches.append(Batch(ops))
        return Join(late, batches)

    def tour(self):
        """Every kind of collective on a process set, and every joinable one while a rank has joined."""
        everyone = tuple(range(self.size))
        ranks = everyone[:-1]  # a proper subset: the global set's ranks cannot be added again
        slot, self.next_slot = self.next_slot, self.next_slot + 1
        self.sets[slot] = ranks
        yield AddSet(slot, ranks)
        yield Batch([self.collective(kind, ranks, slot, 4096) for kind in KINDS])
        del self.sets[slot]
        yield RemoveSet(slot)
        late = everyone[-1:]
        yield Join(late, [Batch([self.collective(kind, everyone, None, 4096, active=late, joinable=True)
                                 for kind in JOINABLE])])

    def prelude(self):
        """Warm-up's fixed part. First the largest op of every kind, so that the core's working
        memory reaches its full size before the flat phase is measured: each run by the waiting
        thread (staggered) and by the engine thread (polled), as the core keeps some working memory
        per thread; reducescatter at sizes from the largest down, whose ring buffers land at
        different offsets of that memory (a page counts once it is first touched); and a join
        with the largest ops a joined rank stages. Then a tour of every kind of event, so that
        warm-up has run every code path; then enough distinct small allreduces, in batches, to fill
        the response cache."""
        everyone = tuple(range(self.size))
        n = self.size
        big = self.max_bytes
        f32 = dict(dtype="float32", op="Sum")
        for form, stagger in (("async", 1), ("poll", 0)):
            yield Batch([self._new("allreduce", everyone, None, shapes=[(big // 4,)] * n, in_place=True, form=form,
                                   **f32)], stagger)
            yield Batch([self._new("allreduce", everyone, None, shapes=[(big // 8,)] * n, form=form, **f32)
                         for _ in range(4)], stagger)
            yield Batch([self._new("grouped_allreduce", everyone, None, shapes=[(big // 16,)] * 4, form=form,
                                   **f32)], stagger)
            for kind in ("allgather", "broadcast", "alltoall"):
                c = self._new(kind, everyone, None, shapes=[(big // 4,)] * n, form=form, **f32)
                if kind == "alltoall":
                    c.splits = [None] * n
                    c.shapes = [(big // 4 // n * n,)] * n
                yield Batch([c], stagger)
        # Reducescatter's working memory is per thread. Staggered one way and the other, every rank
        # but the last to submit waits before the op can run, so its waiting thread runs it.
        for form, stagger in (("async", 1), ("async", -1), ("poll", 0)):
            # The most uneven split of rows a reducescatter can have at this size needs the most
            # working memory, so it goes first: a later, larger need would replace the buffer.
            yield Batch([self._new("reducescatter", everyone, None, shapes=[(n + 1, big // 4 // (n + 1))] * n,
                                   form=form, **f32)], stagger)
            for shape in reducescatter_sweep(big, n):
                yield Batch([self._new("reducescatter", everyone, None, shapes=[shape] * n, form=form, **f32)],
                            stagger)
        yield Batch([self._new("allreduce", everyone, None, shapes=[(big // 2,)] * n, dtype="float16",
                               op="Average", form="blocking")])
        yield Batch([self._new("barrier", everyone, None)])
        late = everyone[-1:]
        joined = min(big, JOIN_MAX_BYTES) // 4
        yield Join(late, [Batch([self._new("allreduce", everyone, None, shapes=[(joined,)] * n, active=late, **f32)
                                 for _ in range(3)] +
                                [self._new("grouped_allreduce", everyone, None, shapes=[(joined // 4,)] * 4,
                                           active=late, **f32)])])
        assert self.done == self.largest_ops(), "largest_ops() is out of date"
        yield from self.tour()
        assert self.done == self.largest_ops() + TOUR_OPS, "TOUR_OPS is out of date"
        left = self.cache_fill()
        while left:
            k = min(left, 32)
            left -= k
            yield Batch([self.collective("allreduce", everyone, None, int(self.rng.integers(1, 257)))
                         for _ in range(k)])

    def events(self):
        """Every event of the launch, Checkpoint("warm-up") after the warm-up ops and
        Checkpoint("end") last; every process set is removed before each checkpoint."""
        for event in self._events():
            self._tally(event)
            yield event

    def _tally(self, event):
        def add(kind):
            self.scheduled[kind] = self.scheduled.get(kind, 0) + 1
            self.done += 1

        if isinstance(event, Batch):
            for c in event.ops:
                add(c.kind)
        elif isinstance(event, AddSet):
            add("add_process_set")
        elif isinstance(event, RemoveSet):
            add("remove_process_set")
        elif isinstance(event, Join):
            add("join")
            for b in event.batches:
                self._tally(b)

    def _events(self):
        yield from self.prelude()
        marks = [("warm-up", self.warmup)] + [("%d" % m, m) for m in self.marks] + [("end", self.count)]
        for label, at in marks:
            while self.done < at - len(self.sets):
                room = at - len(self.sets) - self.done
                u = self.rng.random()
                if u < 0.010 and len(self.sets) < MAX_SETS and room > 1:
                    # a proper subset (a set with the global set's ranks, or a registered set's, is refused)
                    chosen = self.rng.choice(self.size, int(self.rng.integers(1, self.size)), replace=False)
                    ranks = tuple(int(r) for r in sorted(chosen))
                    if ranks in self.sets.values():
                        continue
                    slot, self.next_slot = self.next_slot, self.next_slot + 1
                    self.sets[slot] = ranks
                    yield AddSet(slot, ranks)
                elif u < 0.017 and self.sets:
                    slot = self._pick(sorted(self.sets))
                    del self.sets[slot]
                    yield RemoveSet(slot)
                elif u < 0.022:
                    yield self.join(room)
                else:
                    yield self.batch(room)
            for slot in sorted(self.sets):
                del self.sets[slot]
                yield RemoveSet(slot)
            yield Checkpoint(label)
