"""Which CPUs each rank of a local job runs on.

A rank that migrates between cores, or shares a core with the peer it is waiting for, turns a
collective of microseconds into one of a scheduler time slice: the long tail of a latency-bound
loop. So a local job gives each rank a contiguous share of the launcher's CPUs, as Open MPI binds
by default: whole cores (all of their hardware threads) while there are at least as many cores as
ranks, single hardware threads while there are at least as many of those, and no binding beyond
that, where ranks must share anyway and the scheduler balances best. ``HOROVOD_CPU_BIND=0`` turns
it off. The core sees the ranks' masks and still spins in its waits, as each rank has a CPU of its
own (native/transport/cpu_placement.h).
"""
import os
from collections import OrderedDict
from typing import Callable, Hashable, List, Optional, Sequence

_TOPOLOGY = "/sys/devices/system/cpu/cpu%d/topology/%s"


def allowed_cpus() -> List[int]:
    """The CPUs this process may run on, in order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def core_of(cpu: int) -> Hashable:
    """The physical core a CPU (hardware thread) belongs to: its package and core id, or the CPU
    itself where the kernel does not say."""
    try:
        ids = []
        for name in ("physical_package_id", "core_id"):
            with open(_TOPOLOGY % (cpu, name)) as f:
                ids.append(int(f.read().strip()))
        return tuple(ids)
    except (OSError, ValueError):
        return ("cpu", cpu)


def plan(num_proc: int, cpus: Optional[Sequence[int]] = None,
         core: Callable[[int], Hashable] = core_of) -> Optional[List[List[int]]]:
    """The CPUs of each of ``num_proc`` ranks, or None where there are more ranks than ``cpus``
    (default: this process's). Ranks get contiguous runs of cores in CPU order, as evenly as they
    divide; a core's hardware threads stay together unless there are more ranks than cores."""
    cpus = allowed_cpus() if cpus is None else sorted(cpus)
    if num_proc < 1 or num_proc > len(cpus):
        return None
    cores: "OrderedDict[Hashable, List[int]]" = OrderedDict()
    for cpu in cpus:
        cores.setdefault(core(cpu), []).append(cpu)
    units = list(cores.values())
    if num_proc > len(units):
        units = [[cpu] for unit in units for cpu in unit]
    share, extra = divmod(len(units), num_proc)
    bound, start = [], 0
    for rank in range(num_proc):
        take = share + (1 if rank < extra else 0)
        bound.append(sorted(cpu for unit in units[start:start + take] for cpu in unit))
        start += take
    return bound
