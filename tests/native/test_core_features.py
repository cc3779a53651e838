"""Engine features a user relies on: tensor fusion, the response cache, grouped allreduce, join,
process sets, and the Chrome-trace timeline."""
import json

from horovod_spark.launcher import run_local


def _features(timeline_path):
    import numpy as np

    from horovod_spark.common import _core, basics, ops, process_sets

    basics.init()
    r, n = basics.rank(), basics.size()
    out = {}

    # Fusion and the response cache: the same 32 small tensors for 5 "steps".
    before = dict(_core.stats())
    bufs = [np.full(1000, r + i, np.float32) for i in range(32)]
    for _step in range(5):
        hs = [ops.allreduce_async("grad.%d" % i, b.ctypes.data, b.ctypes.data, "float32", b.shape,
                                  ops.Sum) for i, b in enumerate(bufs)]
        for h in hs:
            ops.wait(h)
    after = _core.stats()
    out["fused"] = after["fused_tensors"] - before["fused_tensors"]
    out["cached_requests"] = after["requests_cached"] - before["requests_cached"]
    out["cached_responses"] = after["responses_cached"] - before["responses_cached"]
    expect = [(sum(q + i for q in range(n))) * n ** 4 for i in range(32)]
    out["fusion_correct"] = all(np.all(b == e) for b, e in zip(bufs, expect))

    # Grouped allreduce: all or nothing, one unit.
    g = [np.full(10, float(r), np.float64), np.full(3, float(2 * r), np.float64)]
    cached_before = _core.stats()["requests_cached"]
    ops.wait(ops.grouped_allreduce_async("g", [x.ctypes.data for x in g], [x.ctypes.data for x in g],
                                         "float64", [x.shape for x in g], ops.Average))
    out["grouped"] = [float(g[0][0]), float(g[1][0])]
    # A bad member (a negative dimension) is refused before anything is queued: the same name
    # then goes through at once instead of finding a half-submitted group in flight.
    try:
        ops.grouped_allreduce_async("g", [x.ctypes.data for x in g], [x.ctypes.data for x in g],
                                    "float64", [g[0].shape, (-3,)], ops.Sum)
        out["bad_member"] = "accepted"
    except ValueError as exc:
        out["bad_member"] = str(exc)
    for _ in range(2):  # the second round of the same group is one cached request
        ops.wait(ops.grouped_allreduce_async("g", [x.ctypes.data for x in g], [x.ctypes.data for x in g],
                                             "float64", [x.shape for x in g], ops.Sum))
    out["grouped_again"] = [float(g[0][0]), float(g[1][0])]
    out["grouped_cached_requests"] = _core.stats()["requests_cached"] - cached_before
    # A packed group among plain tensors (the engine may fuse them all), an empty member, and a
    # prescale applied member by member.
    before_mix = np.ones(5, np.float32)
    members = [np.full(7, float(r), np.float32), np.zeros(0, np.float32), np.ones(2, np.float32)]
    after_mix = np.ones(3, np.float32)
    hs = [ops.allreduce_async("mix.before", before_mix.ctypes.data, before_mix.ctypes.data, "float32",
                              before_mix.shape, ops.Sum),
          ops.grouped_allreduce_async("mix.group", [m.ctypes.data for m in members],
                                      [m.ctypes.data for m in members], "float32", [m.shape for m in members],
                                      ops.Sum, prescale=2.0),
          ops.allreduce_async("mix.after", after_mix.ctypes.data, after_mix.ctypes.data, "float32",
                              after_mix.shape, ops.Sum)]
    for h in hs:
        ops.wait(h)
    out["mixed"] = [before_mix.tolist(), [m.tolist() for m in members], after_mix.tolist()]
    # The same tensor twice in one in-place group, large enough for the copy-free path: the
    # members share memory, so the engine stages them and each gets the plain reduction.
    twice = np.full(20000, float(r + 1), np.float32)
    ops.wait(ops.grouped_allreduce_async("alias.group", [twice.ctypes.data] * 2, [twice.ctypes.data] * 2,
                                         "float32", [twice.shape] * 2, ops.Sum))
    out["aliased"] = sorted(set(twice.tolist()))

    # Process set of ranks {0, 2}: rank 1 is not in it and does other work meanwhile.
    ps = process_sets.add_process_set([0, 2])
    y = np.full(4, float(r), np.float32)
    if r in (0, 2):
        ops.wait(ops.allreduce_async("ps.y", y.ctypes.data, y.ctypes.data, "float32", y.shape,
                                     ops.Sum, process_set_id=ps.process_set_id))
    out["ps_value"] = float(y[0])
    out["ps_rank"] = ps.rank()
    process_sets.remove_process_set(ps)

    # Join: rank 0 runs two more allreduces than the others; they contribute zeros.
    extra = 2 if r == 0 else 0
    z = np.ones(5, np.float32)
    for i in range(extra):
        ops.wait(ops.allreduce_async("tail.%d" % i, z.ctypes.data, z.ctypes.data, "float32",
                                     z.shape, ops.Sum))
    out["joined_result"] = float(z[0])
    # ... and to a grouped allreduce, member by member.
    zs = [np.ones(3, np.float32), np.full(2, 2.0, np.float32)]
    if r == 0:
        ops.wait(ops.grouped_allreduce_async("tail.group", [x.ctypes.data for x in zs],
                                             [x.ctypes.data for x in zs], "float32", [x.shape for x in zs],
                                             ops.Sum))
    out["joined_group"] = [x.tolist() for x in zs]
    out["last_joined"] = ops.wait(ops.join_async())

    if r == 0:
        basics.start_timeline(timeline_path)
    t = np.ones(64, np.float32)
    ops.wait(ops.allreduce_async("traced", t.ctypes.data, t.ctypes.data, "float32", t.shape, ops.Sum))
    basics.stop_timeline()
    basics.shutdown()
    return out


def test_fusion_cache_grouped_process_sets_join_and_timeline(tmp_path):
    timeline = str(tmp_path / "timeline.json")
    results = run_local(_features, args=(timeline,), num_proc=3, timeout=120)
    for r, out in enumerate(results):
        assert out["fusion_correct"]
        assert out["fused"] > 0, out           # small tensors travelled fused
        assert out["cached_requests"] >= 32 * 3 if r else True, out  # steps 2..5 sent cache ids
        assert out["cached_responses"] > 0, out
        assert out["grouped"] == [1.0, 2.0]
        assert "negative dimension" in out["bad_member"], out["bad_member"]
        assert out["grouped_again"] == [9.0, 18.0]
        assert out["grouped_cached_requests"] == 1, out  # a whole group is one cached request
        assert out["aliased"] == [float(sum(q + 1 for q in range(3)))], out["aliased"]
        assert out["mixed"] == [[3.0] * 5, [[6.0] * 7, [], [6.0] * 2], [3.0] * 3], out["mixed"]
        assert out["ps_value"] == (2.0 if r in (0, 2) else 1.0)
        assert out["ps_rank"] == {0: 0, 1: None, 2: 1}[r]
        assert out["joined_result"] == 1.0     # only rank 0 contributed: the others joined
        assert out["joined_group"] == [[1.0] * 3, [2.0] * 2]
        assert out["last_joined"] == 0
    with open(timeline) as f:
        events = json.load(f)
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    phases = {e.get("name") for e in events if e.get("ph") == "B"}
    assert "traced" in names
    assert {"QUEUE", "NEGOTIATE_allreduce", "ALLREDUCE", "COLLECTIVE"} <= phases, phases


def test_timeline_from_environment(tmp_path):
    path = str(tmp_path / "env_timeline.json")

    def fn():
        import numpy as np

        from horovod_spark.common import basics, ops
        basics.init()
        x = np.ones(8, np.float32)
        ops.wait(ops.allreduce_async("w", x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Sum))
        basics.shutdown()

    run_local(fn, num_proc=2, env={"HOROVOD_TIMELINE": path}, timeout=60)
    with open(path) as f:
        events = json.load(f)
    assert any(e.get("args", {}).get("name") == "w" for e in events)


def test_init_arguments_as_horovod_takes_them():
    """What hvd.init() accepts besides its defaults, checked before anything starts."""
    import pytest

    from horovod_spark.common import basics, process_sets, rendezvous

    assert basics._initial_process_sets("dynamic") == [] and basics._initial_process_sets(None) == []
    sets = basics._initial_process_sets([[0, 2], process_sets.ProcessSet(range(2))])
    assert [s.ranks for s in sets] == [[0, 2], [0, 1]]
    with pytest.raises(ValueError, match="'dynamic'"):
        basics._initial_process_sets("static")
    with pytest.raises(ValueError, match="iterable of global ranks"):
        process_sets.ProcessSet(["a"])
    assert process_sets.ProcessSet({3, 1}).ranks == [1, 3]
    # An empty rank list is Horovod's "every rank"; a subset needs a communicator.
    env = {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"}
    ident = rendezvous.identity_from([], environ=env)
    assert (ident.rank, ident.size, ident.source) == (1, 2, "env")
    with pytest.raises(ValueError, match="mpi4py communicator"):
        rendezvous.identity_from([0], environ=env)
    # A root is a global rank; the core counts it within the set.
    ps = process_sets.ProcessSet([1, 3])
    ps.process_set_id = 7
    assert process_sets.root_index(3, ps) == 1
    with pytest.raises(ValueError, match="not a member of the process set"):
        process_sets.root_index(0, ps)
    with pytest.raises(TypeError, match="root_rank must be an int"):
        process_sets.root_index("first", ps)


def _postscale_on_one_rank(members):
    """A grouped allreduce and fused plain allreduces, over 64 KiB in all (the copy-free fused path),
    with a postscale, on a group of one rank: a one-rank job, or a one-rank process set."""
    import numpy as np

    from horovod_spark.common import basics, ops, process_sets

    basics.init()
    ps = process_sets.add_process_set(members) if members else process_sets.global_process_set
    got = None
    if ps.included():
        group = [np.full(20000, 4.0, np.float32) for _ in range(2)]
        ptrs = [x.ctypes.data for x in group]
        ops.wait(ops.grouped_allreduce_async("one.group", ptrs, ptrs, "float32", [x.shape for x in group], ops.Sum,
                                             prescale=0.25, postscale=8.0, process_set_id=ps.process_set_id))
        plain = [np.full(20000, 4.0, np.float32) for _ in range(2)]
        for h in [ops.allreduce_async("one.plain.%d" % i, x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Max,
                                      postscale=0.5, process_set_id=ps.process_set_id) for i, x in enumerate(plain)]:
            ops.wait(h)
        got = sorted({float(v) for x in group for v in x}), sorted({float(v) for x in plain for v in x})
    if members:
        process_sets.remove_process_set(ps)
    basics.shutdown()
    return got


def test_postscale_on_a_group_of_one_rank():
    assert run_local(_postscale_on_one_rank, args=(None,), num_proc=1, timeout=60) == [([8.0], [2.0])]
    assert run_local(_postscale_on_one_rank, args=([1],), num_proc=2, timeout=60) == [None, ([8.0], [2.0])]
