"""MPI allreduce worker: ``mpirun -np N python mpi_allreduce.py --sizes ...`` under any MPI
(Open MPI, MPICH, Intel MPI): mpi4py loads the library of the environment it runs in.

In-place ``comm.Allreduce(MPI.IN_PLACE, buf)`` on numpy float32 buffers, as mpi4py users write it;
``--collectives`` adds Allgather, Bcast, Reduce_scatter_block and Alltoall.
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

    def collective(self, name, buf):
        comm, n = self.comm, self.size
        if name == "broadcast":
            return (lambda: comm.Bcast(buf, root=0)), (lambda: buf)
        out = np.empty(buf.size * n if name == "allgather" else buf.size // n if name == "reducescatter"
                       else buf.size, dtype=np.float32)
        if name == "allgather":
            op = lambda: comm.Allgather(buf, out)  # noqa: E731
        elif name == "reducescatter":
            op = lambda: comm.Reduce_scatter_block(buf, out, op=MPI.SUM)  # noqa: E731
        else:
            op = lambda: comm.Alltoall(buf, out)  # noqa: E731
        return op, (lambda: out)

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
        _timing.emit_identity(adapter, "mpi", MPI.Get_library_version().strip().splitlines()[0].strip())
        _timing.bench_sizes(adapter, "mpi", _timing.sizes_of(args.sizes), args.quick, args.timings)
        _timing.bench_collectives(adapter, "mpi", args.collectives, _timing.sizes_of(args.collective_sizes),
                                  args.quick, args.timings)
    except Exception as exc:
        _timing.report_failure("mpi", adapter.rank, exc)
        # Without Abort the other ranks would wait forever in the next collective.
        MPI.COMM_WORLD.Abort(1)


if __name__ == "__main__":
    main()
