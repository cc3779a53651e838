"""Rank placement: from the registration table to each rank's Horovod topology variables.

rank is the Spark partition id, so results and logs line up with partitions. Ranks that share a
host key form one "local" group (ordered by rank); the "cross" group of a rank is the set of ranks
with the same local_rank on the other hosts, hosts ordered by their lowest rank. This matches what
the core derives itself from HOROVOD_HOSTNAME, so the runner exports the host key as
HOROVOD_HOSTNAME and the two can never disagree.
"""
import socket
from dataclasses import dataclass
from typing import Dict, List, Sequence

from horovod_spark.common import config


@dataclass(frozen=True)
class Placement:
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    host: str

    def env(self) -> Dict[str, str]:
        return {
            config.RANK.name: str(self.rank),
            config.SIZE.name: str(self.size),
            config.LOCAL_RANK.name: str(self.local_rank),
            config.LOCAL_SIZE.name: str(self.local_size),
            config.CROSS_RANK.name: str(self.cross_rank),
            config.CROSS_SIZE.name: str(self.cross_size),
            config.HOSTNAME.name: self.host,
        }


def host_key(mode: str, executor_address: str) -> str:
    """The identity that decides which ranks are "local" to each other (share memory).

    A HOROVOD_HOSTNAME already in the executor's environment wins (set it with
    spark.executorEnv.HOROVOD_HOSTNAME), because only the operator knows e.g. that two containers
    share a hostname but not /dev/shm. Mode "executor" makes every executor its own host for the
    same reason, without per-executor configuration.
    """
    base = config.HOSTNAME.get() or socket.gethostname()
    if mode == "executor":
        return "%s/%s" % (base, executor_address)
    return base


def compute(hosts_by_rank: Sequence[str]) -> List[Placement]:
    size = len(hosts_by_rank)
    host_order: List[str] = []
    local_ranks: Dict[str, List[int]] = {}
    for rank, host in enumerate(hosts_by_rank):
        if host not in local_ranks:
            host_order.append(host)
            local_ranks[host] = []
        local_ranks[host].append(rank)

    out = []
    for rank, host in enumerate(hosts_by_rank):
        local_rank = local_ranks[host].index(rank)
        peers = [h for h in host_order if len(local_ranks[h]) > local_rank]
        out.append(Placement(rank=rank, size=size, local_rank=local_rank,
                             local_size=len(local_ranks[host]), cross_rank=peers.index(host),
                             cross_size=len(peers), host=host))
    return out
