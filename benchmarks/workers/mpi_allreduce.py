"""Open MPI allreduce worker: ``mpirun -np N python mpi_allreduce.py --sizes ...``.

In-place ``comm.Allreduce(MPI.IN_PLACE, buf)`` on numpy float32 buffers, as mpi4py users write it.
"""
import sys

import _timing
import numpy as np

try:
    from mpi4py import MPI
except ImportError as exc:
    sys.exit("mpi worker: mpi4py is not importable (%s); pip install mpi4py" % exc)


class Adapter:
    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()

    def alloc(self, count):
        return np.zeros(count, dtype=np.float32)

    def fill(self, buf, value):
        buf.fill(value)

    def ends(self, buf):
        return [float(buf[0]), float(buf[-1])]

    def allreduce(self, buf, nbytes):
        self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

    def barrier(self):
        self.comm.Barrier()

    def max_across(self, arr):
        out = np.ascontiguousarray(arr, dtype=np.float64)
        self.comm.Allreduce(MPI.IN_PLACE, out, op=MPI.MAX)
        return out


def main():
    args = _timing.parse_args()
    adapter = Adapter(MPI.COMM_WORLD)
    try:
        _timing.bench_sizes(adapter, "mpi", [int(s) for s in args.sizes.split(",")], args.quick)
    except Exception as exc:
        _timing.report_failure("mpi", adapter.rank, exc)
        # Without Abort the other ranks would wait forever in the next collective.
        MPI.COMM_WORLD.Abort(1)


if __name__ == "__main__":
    main()
