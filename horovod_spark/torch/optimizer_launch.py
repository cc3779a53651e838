"""When DistributedOptimizer starts the allreduces of a step's gradients.

Horovod starts each gradient's allreduce from its hook, the moment backward has produced it, so
that communication overlaps the rest of backward. That pays where something is free to carry the
communication meanwhile: a GPU computes while the CPU communicates, and transfers between hosts
are mostly waiting on the network. With every rank on one host, gradients on the CPU and at least
as many compute threads as the host gives the ranks cores, the communication (copies and
reductions in shared memory) is CPU work that can only take turns with backward: starting it early
costs a wake-up of the engine and a negotiation per burst of gradients, and hides nothing. There
the optimizer starts them all when ``step()`` (``synchronize()``) asks for them, in one call into
the core, which fuses them into one transfer.

Either way each gradient travels as its own allreduce under its own name, so ranks that decide
differently (one rank whose model fell back to the CPU, say) still match each other.
"""
import torch

from horovod_spark.common import basics


def local_cpus() -> int:
    """The CPUs this host's ranks may run on between them (the union of their affinity masks, which
    the core learns at set-up): all of them when the ranks share the host's CPUs, their own when
    each rank is bound to its cores."""
    return basics.cpu_placement()["local_cpus"]


def launch_at_step(params) -> bool:
    """True when the allreduces of ``params``' gradients are best started at ``step()`` rather than
    from their hooks during backward (see the module's doc)."""
    if not params or any(p.device.type != "cpu" for p in params):
        return False
    if basics.size() != basics.local_size():  # ranks on other hosts: transfers that wait on the network
        return False
    return basics.local_size() * torch.get_num_threads() >= local_cpus()
