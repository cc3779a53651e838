"""Hierarchical (two-level) allreduce and allgather with real rank processes on simulated hosts.

Each rank names its host in HOROVOD_HOSTNAME before hvd.init(), so ranks of one "host" share memory
and the "hosts" talk TCP, as on a cluster. Placements 2x2, 3x2, hosts of 1, 2 and 3 ranks, and one
host; results are compared exactly with numpy (integer-valued inputs, whose sums, products, minima
and maxima are exact in every dtype and order), every rank gets the same bits, and the core says
which algorithm ran."""
import pytest

from horovod_spark.common import config
from horovod_spark.launcher import run_local

PLACEMENTS = {"2x2": [0, 0, 1, 1], "3x2": [0, 0, 1, 1, 2, 2], "1/2/3": [0, 1, 1, 2, 2, 2], "1 host": [0, 0, 0]}


def _inputs(dtype, count, rank, op, salt=0):
    """Small integers: for Product in {1, 2} (at most 2**6 = 64 on 6 ranks), else in [-8, 8) ([0, 9) unsigned)."""
    import numpy as np
    from support import core_reference as ref
    rng = np.random.default_rng([rank, count, ref.DTYPES.index(dtype), salt])
    if dtype == "bool":
        return rng.integers(0, 2, count).astype(bool)
    low, high = (1, 3) if op == "Product" else (0, 9) if dtype in ("uint8", "uint16") else (-8, 8)
    vals = rng.integers(low, high, count).astype(np.float32)
    if dtype == "bfloat16":
        return (vals.view(np.uint32) >> 16).astype(np.uint16)
    return vals.astype(dtype)


def _exact(raw, reference, dtype):
    import numpy as np
    from support import core_reference as ref
    if dtype == "bool":
        return np.array_equal(raw.astype(bool), reference)
    return np.array_equal(ref.to_float64(raw, dtype), reference)


def _job(hosts, settings, set_ranks):
    """One rank: collectives on every dtype and op, fused, grouped, allgather, a process set."""
    import hashlib
    import os

    import numpy as np
    from support import core_reference as ref

    from horovod_spark.common import _core, basics, ops, process_sets

    rank = int(os.environ[config.RANK.name])
    os.environ[config.HOSTNAME.name] = "host%d" % hosts[rank]
    for variable in (config.LOCAL_RANK, config.LOCAL_SIZE, config.CROSS_RANK, config.CROSS_SIZE):
        os.environ.pop(variable.name, None)
    for name, value in settings.get(rank, settings.get("all", {})).items():
        os.environ[name] = value
    basics.init()
    n = basics.size()
    failures = []
    chosen = (basics.hierarchical_allreduce_enabled(), basics.hierarchical_allgather_enabled())

    def check(what, ok):
        if not ok:
            failures.append("rank %d: %s" % (rank, what))

    for dtype in ref.DTYPES:
        for count in (0, 7, 33333):
            for op_name, op in ref.OPS.items():
                xs = [_inputs(dtype, count, q, op_name) for q in range(n)]
                out = np.empty_like(xs[rank]) if count % 2 else xs[rank].copy()
                src = xs[rank] if count % 2 else out  # odd counts out of place, the others in place
                ops.wait(ops.allreduce_async("ar.%s.%d.%s" % (dtype, count, op_name), src.ctypes.data,
                                             out.ctypes.data, dtype, out.shape, op))
                check("allreduce %s %s[%d]" % (op_name, dtype, count),
                      _exact(out, ref.reduce_reference(xs, dtype, op_name), dtype))
    # Average with pre/postscale (1/n is inexact: compared within rounding), fused tensors, a group.
    xs = [_inputs("float64", 100003, q, "Sum") for q in range(n)]
    buf = xs[rank].copy()
    ops.wait(ops.allreduce_async("avg", buf.ctypes.data, buf.ctypes.data, "float64", buf.shape, ops.Average,
                                 prescale=2.0, postscale=0.5))
    check("average", np.allclose(buf, np.sum(xs, 0) / n, rtol=1e-14, atol=1e-14))
    counts = [1, 7, 4099, 0, 333, 20011, 5, 70001]
    fused = [[_inputs("float32", c, q, "Sum", salt=i) for i, c in enumerate(counts)] for q in range(n)]
    mine = [x.copy() for x in fused[rank]]
    handles = [ops.allreduce_async("fz.%d" % i, x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Sum)
               for i, x in enumerate(mine)]
    group = [x.copy() for x in fused[rank]]
    handles.append(ops.grouped_allreduce_async("fz.group", [x.ctypes.data for x in group],
                                               [x.ctypes.data for x in group], "float32",
                                               [x.shape for x in group], ops.Sum))
    for h in handles:
        ops.wait(h)
    for i in range(len(counts)):
        expect = ref.reduce_reference([fused[q][i] for q in range(n)], "float32", "Sum")
        check("fused tensor %d" % i, _exact(mine[i], expect, "float32"))
        check("group member %d" % i, _exact(group[i], expect, "float32"))
    # An inexact sum: its bits are compared across ranks by the test.
    noisy = ref.make_input("float32", 250001, rank)
    ops.wait(ops.allreduce_async("noisy", noisy.ctypes.data, noisy.ctypes.data, "float32", noisy.shape, ops.Sum))
    check("inexact sum", ref.matches(noisy, ref.reduce_reference(
        [ref.make_input("float32", 250001, q) for q in range(n)], "float32", "Sum"), "float32"))
    # allgather: rows differ per rank, some ranks give none; small and large totals.
    for scale in (1, 5000):
        rows = [(q % 3) * scale for q in range(n)]
        parts = [_inputs("int64", rows[q] * 3, q, "Sum", salt=9).reshape(rows[q], 3) for q in range(n)]
        raw, shape = ops.wait(ops.allgather_async("ag.%d" % scale, parts[rank].ctypes.data, "int64",
                                                  parts[rank].shape))
        check("allgather x%d" % scale, shape == (sum(rows), 3) and
              np.array_equal(raw.view(np.int64).reshape(shape), np.concatenate(parts)))
    in_set = None
    if set_ranks:
        ps = process_sets.add_process_set(set_ranks)
        if rank in set_ranks:
            in_set = (basics.hierarchical_allreduce_enabled(ps), basics.hierarchical_allgather_enabled(ps))
            xs = [_inputs("int32", 50001, q, "Sum", salt=4) for q in set_ranks]
            buf = xs[set_ranks.index(rank)].copy()
            ops.wait(ops.allreduce_async("ps.sum", buf.ctypes.data, buf.ctypes.data, "int32", buf.shape, ops.Sum,
                                         process_set_id=ps.process_set_id))
            check("process set sum", np.array_equal(buf, np.sum(xs, 0)))
            raw, shape = ops.wait(ops.allgather_async("ps.ag", xs[set_ranks.index(rank)].ctypes.data, "int32",
                                                      buf.shape, process_set_id=ps.process_set_id))
            check("process set allgather", np.array_equal(raw.view(np.int32), np.concatenate(xs)))
    stats = _core.stats()
    ops.wait(ops.barrier_async())
    basics.shutdown()
    return {"chosen": chosen, "in_set": in_set, "failures": failures, "digest": hashlib.sha256(noisy).hexdigest(),
            "ran": (stats["hierarchical_allreduces"] > 0, stats["hierarchical_allgathers"] > 0)}


def _run(placement, settings=None, set_ranks=None):
    hosts = PLACEMENTS[placement]
    results = run_local(_job, args=(hosts, settings or {}, set_ranks), num_proc=len(hosts), timeout=600)
    failures = [f for r in results for f in r["failures"]]
    assert not failures, "\n".join(failures[:40])
    assert len({r["digest"] for r in results}) == 1, "ranks ended with different bits for the same sum"
    return results


@pytest.mark.parametrize("placement, setting, two_levels", [
    ("2x2", None, True), ("3x2", None, True), ("1/2/3", None, False), ("1/2/3", "1", True), ("1 host", "1", False),
    ("2x2", "0", False)])
def test_results_are_exact_and_the_rule_picks_the_algorithm(placement, setting, two_levels):
    env = {} if setting is None else {config.HIERARCHICAL_ALLREDUCE.name: setting,
                                      config.HIERARCHICAL_ALLGATHER.name: setting}
    set_ranks = [0, 1, 2, 3] if len(PLACEMENTS[placement]) == 6 else None
    results = _run(placement, {"all": env}, set_ranks)
    for r in results:
        assert r["chosen"] == (two_levels, two_levels)
        assert r["ran"] == (two_levels, two_levels)
    if placement == "3x2":  # ranks 0-3: two hosts of two
        assert {r["in_set"] for r in results[:4]} == {(True, True)}
    if placement == "1/2/3" and setting is None:  # ranks 0-3: hosts of 1, 2 and 1
        assert {r["in_set"] for r in results[:4]} == {(False, False)}


def test_rank_0s_setting_counts_for_every_rank():
    off = {config.HIERARCHICAL_ALLREDUCE.name: "0", config.HIERARCHICAL_ALLGATHER.name: "0"}
    results = _run("2x2", {0: off})
    assert [r["chosen"] for r in results] == [(False, False)] * 4
