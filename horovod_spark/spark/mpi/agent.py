"""mpirun's remote-shell agent in MPI mode: ``python -m horovod_spark.spark.mpi.agent HOST CMD...``.

mpirun (Open MPI's rsh/ssh launcher) calls its agent once per host, as it would call ssh, with
the command that starts its daemon there. Our "hosts" are the Spark tasks (``hs-rank-<partition>``),
so instead of opening a shell on a machine we ask the driver service to run the command inside
that task, then mirror the daemon's lifetime and exit status as ssh would: mpirun treats the
agent exiting as the daemon exiting. The driver's address and secret come from the environment
mpirun inherited from run(), never from the command line (visible in ps).
"""
import re
import sys

from horovod_spark.common import config
from horovod_spark.common.kv_client import KVClient

HOST_PATTERN = re.compile(r"^hs-rank-(\d+)$")
_WAIT_S = 30.0


def host_name(rank: int) -> str:
    return "hs-rank-%d" % rank


def main(argv) -> int:
    if len(argv) < 3:
        sys.stderr.write("usage: mpi_agent HOST COMMAND...\n")
        return 255
    match = HOST_PATTERN.match(argv[1])
    if not match:
        sys.stderr.write("horovod_spark mpi_agent: %r is not a Spark task of this job (expected "
                         "hs-rank-N); was mpirun given other hosts?\n" % argv[1])
        return 255
    rank = int(match.group(1))
    # ssh semantics: the remote shell parses the words joined by spaces.
    command = " ".join(argv[2:])
    hint = "horovod_spark.run sets it for mpirun in MPI mode"
    client = KVClient(config.SPARK_AGENT_ADDR.require(hint=hint), config.SPARK_AGENT_PORT.require(hint=hint),
                      config.SPARK_AGENT_KEY.require(hint=hint))
    try:
        seq = client.request("mpi_exec", rank, ["/bin/sh", "-c", command], {})
        while True:
            outcome = client.request("mpi_wait", rank, seq, _WAIT_S, wait=_WAIT_S)
            if outcome is None:
                continue  # still running; long-poll again
            if outcome == "aborted":
                sys.stderr.write("horovod_spark mpi_agent: run() aborted the job before the daemon "
                                 "on %s exited\n" % argv[1])
                return 255
            return int(outcome)
    except Exception as exc:
        sys.stderr.write("horovod_spark mpi_agent: lost the driver service while running the "
                         "daemon on %s: %s\n" % (argv[1], exc))
        return 255
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
