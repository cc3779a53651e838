"""A short soak of the collective core (benchmarks/soak.py runs the long one): a few hundred mixed
collectives on 3 ranks, once with fusion and once without, every result checked bit for bit
against numpy, and each rank's open descriptors and anonymous memory flat after warm-up."""
import os
import sys

import numpy as np
from support import REPO_ROOT

sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
import soak  # noqa: E402
import soak_plan  # noqa: E402
import soak_values  # noqa: E402
from soak_rank import mismatch  # noqa: E402


def _collectives(events):
    for e in events:
        batches = [e] if isinstance(e, soak_plan.Batch) else e.batches if isinstance(e, soak_plan.Join) else []
        for b in batches:
            yield from b.ops


def test_schedule_is_reproducible_and_covers_every_kind_dtype_and_op():
    def build():
        planner = soak_plan.Planner(seed=3, size=3, count=800, max_bytes=64 << 10, warmup=50, cache_capacity=64)
        return planner, list(planner.events())

    planner, events = build()
    assert build()[1] == events  # what lets every rank rebuild every rank's inputs
    assert planner.done == 800 == sum(planner.scheduled.values())
    assert set(planner.scheduled) == set(soak.ROW_KINDS)
    ops = list(_collectives(events))
    assert {c.dtype for c in ops} == set(soak_values.DTYPES)
    reductions = [c for c in ops if c.kind in ("allreduce", "reducescatter")]
    assert {c.op for c in reductions} == set(soak_plan.REDUCE_OPS)
    assert any(c.prescale != 1 for c in reductions) and any(c.postscale != 1 for c in reductions)
    assert {c.form for c in ops} == {"async", "poll", "blocking"}
    assert any(c.slot is not None for c in ops) and any(c.active is not None for c in ops)
    assert any(len(set(c.shapes)) > 1 for c in ops if c.kind == "allgather")
    assert any(c.splits and any(s is not None for s in c.splits) for c in ops if c.kind == "alltoall")
    assert len({c.root for c in ops if c.kind == "broadcast"}) > 1


def test_bitwise_comparison_catches_what_a_tolerance_would_not():
    want = np.array([1.0, -0.0, 2.5], np.float32)
    assert mismatch(want.copy(), want, "float32") is None
    assert "1 of 3 elements differ; first at 1" in mismatch(np.array([1.0, 0.0, 2.5], np.float32), want, "float32")
    close = want.copy()
    close[2] = np.nextafter(np.float32(2.5), np.float32(3))
    assert "first at 2" in mismatch(close, want, "float32")
    assert "shape" in mismatch(want[:2], want, "float32")
    assert mismatch(np.array([True, False]), np.array([True, True]), "bool")


def test_reference_rounds_as_the_core_documents():
    # Average of float16 over 3 ranks: the sum times float(1/3) in float32, then rounded to half
    total = np.array([2.0], np.float32)
    got = soak_values.scale(total, "float16", 1 / 3)
    assert got[0] == np.float16(np.float32(2) * np.float32(1 / 3))
    # integers: the product truncated toward zero
    assert soak_values.scale(np.array([-5.0, 5.0], np.float32), "int8", 0.5).tolist() == [-2, 2]
    # a value the dtype cannot hold exactly is the soak's own error, not a core failure
    try:
        soak_values.encode(np.array([257.0], np.float32), "bfloat16")
    except soak_values.PlanError:
        pass
    else:
        raise AssertionError("encode accepted 257 as an exact bfloat16")


def test_short_soak_on_three_ranks():
    # A small response cache, so that warm-up fills it within a short run.
    report = soak.run_soak(count=1000, num_proc=3, seed=7, max_bytes=256 << 10, configs=("default", "nofusion"),
                           rss_tolerance_mib=1.0, fd_tolerance=0, timeout=240, env={"HOROVOD_CACHE_CAPACITY": "64"})
    text = soak.format_report(report)
    assert report["passed"], text
    for launch in report["launches"]:
        assert set(launch["schedule"]) == set(soak.ROW_KINDS), text
        for rank in launch["ranks"]:
            assert len(rank["checkpoints"]) >= 3, text
