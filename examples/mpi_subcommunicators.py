"""Two independent horovod_spark jobs inside one mpirun, one per mpi4py sub-communicator, mixing
horovod_spark collectives with plain mpi4py calls.

    mpirun -np 4 python examples/mpi_subcommunicators.py

Even world ranks form one job and odd ranks another; each trains its own model with
DistributedOptimizer over MPI, and the world communicator is still free for mpi4py traffic.
"""
import torch
from mpi4py import MPI

import horovod_spark.torch as hvd


def main():
    world = MPI.COMM_WORLD
    color = world.rank % 2
    sub = world.Split(color, world.rank)
    hvd.init(comm=sub)
    assert hvd.mpi_enabled() and hvd.size() == sub.size

    torch.manual_seed(color)  # the two jobs start from different models
    model = torch.nn.Linear(4, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x = torch.randn(16, 4) + hvd.rank()
    for _ in range(5):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()

    # Parameters agree within a job; the two jobs differ. Checked with plain mpi4py calls.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()
    job_params = sub.allgather(flat)
    same_within_job = all((p == job_params[0]).all() for p in job_params)
    world_params = world.allgather((color, flat))
    jobs_differ = not (world_params[0][1] == world_params[1][1]).all()
    if world.rank < 2:
        print("job %d: %d ranks, mpi_threads_supported=%s, params equal within job: %s, "
              "jobs independent: %s" % (color, hvd.size(), hvd.mpi_threads_supported(),
                                        same_within_job, jobs_differ), flush=True)
    hvd.shutdown()
    if not (same_within_job and jobs_differ):
        raise SystemExit("sub-communicator jobs did not behave independently")


if __name__ == "__main__":
    main()
