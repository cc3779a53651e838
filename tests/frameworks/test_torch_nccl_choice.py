"""Which path a collective on a CUDA tensor takes: NCCL or host staging (horovod_spark.torch._nccl),
checked with real ranks on any machine. Without NCCL (or with a GPU shared by ranks) auto mode
stages through host memory, silently; HOROVOD_GPU_OPERATIONS=nccl then raises the loader's reason.
The NCCL collectives themselves are tested in tests/gpu/test_torch_nccl.py."""
import io

import pytest

from horovod_spark.common import config, nccl
from horovod_spark.common import ops as core_ops
from horovod_spark.launcher import run_local

F32, F16, I32, I16, BOOL = (core_ops.DTYPES[n] for n in ("float32", "float16", "int32", "int16", "bool"))
S, AVG, MIN, PROD, ADASUM = (int(o) for o in (core_ops.Sum, core_ops.Average, core_ops.Min, core_ops.Product,
                                              core_ops.Adasum))


@pytest.mark.parametrize("variable", [config.GPU_OPERATIONS, config.GPU_ALLREDUCE, config.GPU_ALLGATHER,
                                      config.GPU_BROADCAST, config.GPU_ALLTOALL, config.GPU_REDUCESCATTER])
def test_a_bad_gpu_operations_value_is_refused_by_name(variable):
    with pytest.raises(config.ConfigError, match="%s='ddl' is not one of nccl, host, auto; set it to one of nccl, "
                                                 "host, auto \\(mpi means host, gloo means host\\)" % variable.name):
        variable.get({variable.name: "ddl"})


def test_the_mode_of_an_op_is_its_own_variable_else_the_common_one(monkeypatch):
    for name in ("HOROVOD_GPU_OPERATIONS", "HOROVOD_GPU_ALLREDUCE", "HOROVOD_GPU_BROADCAST"):
        monkeypatch.delenv(name, raising=False)
    assert nccl.mode("allreduce") == "auto"
    monkeypatch.setenv("HOROVOD_GPU_OPERATIONS", "NCCL")
    monkeypatch.setenv("HOROVOD_GPU_ALLREDUCE", "gloo")
    assert (nccl.mode("allreduce"), nccl.mode("broadcast")) == ("host", "nccl")


@pytest.mark.parametrize("dtype, op, prescale, postscale, reduces, expected", [
    (F32, S, 1.0, 1.0, True, True), (F16, AVG, 0.5, 3.0, True, True), (I32, S, 1.0, 1.0, True, True),
    (I32, MIN, 1.0, 1.0, True, True), (F32, PROD, 1.0, 1.0, True, True),
    (I32, S, 2.0, 1.0, True, False),    # a scaled integer sum: staged, as NCCL scales floats only
    (I32, AVG, 1.0, 1.0, True, False),  # integer Average: staged, keeping the CPU core's rounding
    (F32, MIN, 2.0, 1.0, True, False),  # min(k * x) != k * min(x) for k < 0
    (F32, ADASUM, 1.0, 1.0, True, False), (I16, S, 1.0, 1.0, True, False), (BOOL, S, 1.0, 1.0, True, False),
    (I16, S, 1.0, 1.0, False, True), (BOOL, S, 1.0, 1.0, False, True),  # data movement: any dtype, as bytes
])
def test_what_nccl_runs_and_what_is_staged(dtype, op, prescale, postscale, reduces, expected):
    assert nccl.supports(dtype, op, prescale, postscale, reduces) is expected


def _choices(identities):
    import os
    import warnings

    import horovod_spark.torch as hvd
    from horovod_spark.common.process_sets import global_process_set
    from horovod_spark.torch import _nccl

    hvd.init()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            os.environ.pop("HOROVOD_GPU_OPERATIONS", None)
            auto = _nccl.decide("allreduce", F32, S, 1.0, 1.0, global_process_set, lambda: identities[hvd.rank()])
            os.environ["HOROVOD_GPU_OPERATIONS"] = "host"
            host = _nccl.decide("allgather", F32, S, 1.0, 1.0, global_process_set, lambda: 1 / 0)
            os.environ["HOROVOD_GPU_OPERATIONS"] = "nccl"
            try:
                forced = _nccl.decide("broadcast", F32, S, 1.0, 1.0, global_process_set, lambda: 1 / 0)
            except RuntimeError as exc:
                forced = str(exc)
        return auto, host, forced, nccl.available(), [str(w.message) for w in caught]
    finally:
        hvd.shutdown()


@pytest.mark.parametrize("identities", [(11, 22), (33, 33)], ids=["own-gpus", "one-shared-gpu"])
def test_auto_mode_agrees_across_ranks_and_stages_silently_without_nccl(identities):
    err = io.StringIO()
    results = run_local(_choices, args=(identities,), num_proc=2, timeout=120, stderr=err)
    everywhere = all(r[3] for r in results)
    for auto, host, forced, usable, caught in results:
        # NCCL only where every rank can run it, on a GPU of its own; never for host mode.
        assert auto is (everywhere and identities[0] != identities[1])
        assert host is False
        if usable:
            assert forced is True
        else:
            assert forced.startswith("NCCL data plane unavailable:") and "HOROVOD_GPU_BROADCAST asks for NCCL" in forced
        assert caught == []
    assert "Warning" not in err.getvalue(), err.getvalue()


def _alltoall_splits(cases):
    import horovod_spark.torch as hvd
    from horovod_spark.common.process_sets import global_process_set
    from horovod_spark.torch import _nccl

    hvd.init()
    try:
        out = []
        for i, per_rank in enumerate(cases):
            dim0, splits = per_rank[hvd.rank()]
            try:
                out.append(_nccl.received_splits("a2a.%d" % i, dim0, splits, global_process_set))
            except ValueError as exc:
                out.append(str(exc))
        return out
    finally:
        hvd.shutdown()


def test_alltoall_agrees_on_received_splits_and_refuses_bad_ones_on_every_rank():
    cases = [
        [(3, [1, 2]), (5, [4, 1])],  # rank 0 sends 1 row to itself and 2 to rank 1 ...
        [(4, None), (6, None)],      # even splits
        [(3, None), (4, None)],      # rank 0's 3 rows do not split over 2 ranks
        [(3, [1, 2]), (5, [4, 2])],  # rank 1's splits sum to 6, not 5
    ]
    results = run_local(_alltoall_splits, args=(cases,), num_proc=2, timeout=120)
    assert results[0][:2] == [[1, 4], [2, 3]] and results[1][:2] == [[2, 1], [2, 3]]
    for rank_results in results:
        assert rank_results[2] == ("alltoall of 'a2a.2': set rank 0's first dimension 3 does not divide by 2 ranks; "
                                   "pass splits")
        assert rank_results[3] == ("alltoall of 'a2a.3': set rank 1 gave splits [4, 2]; they must have 2 non-negative "
                                   "entries summing to the first dimension 5")
