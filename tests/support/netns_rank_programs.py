"""Programs that ranks started by ``support.netns_ranks`` run: ``python -m support.netns_rank_programs NAME``.

They report through stdout lines ``RESULT <json>``.
"""
import json
import sys
import time


def _report(obj) -> None:
    sys.stdout.write("RESULT " + json.dumps(obj) + "\n")
    sys.stdout.flush()


def checks() -> None:
    """Placement, links and every collective (support.multihost_checks)."""
    import horovod_spark.torch as hvd
    from support import multihost_checks
    hvd.init()
    seen = multihost_checks.placement_and_links()
    seen["checks"] = multihost_checks.collectives()
    _report(seen)
    hvd.shutdown()


def init_and_allreduce() -> None:
    """hvd.init() and one allreduce: reports the sum and the TCP links, or the error and how long
    after hvd.init() was called it came."""
    import torch

    import horovod_spark.torch as hvd
    from support import multihost_checks
    started = time.time()
    try:
        hvd.init()
        links = multihost_checks.established_peers_by_ip()  # before any rank can finish and leave
        total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum).item()
    except Exception as exc:  # what the test wants to see
        _report({"error": "%s: %s" % (type(exc).__name__, exc), "after_init_s": time.time() - started})
        return
    _report({"sum": total, "tcp_by_ip": links})
    hvd.shutdown()


def train_until_error() -> None:
    """A training loop of 1 MiB allreduces that reports once it is running (``steady``) and then
    the first error it meets, with the time, and exits 0; exit 3 if it never fails within 120 s."""
    import torch

    import horovod_spark.torch as hvd
    hvd.init()
    grad = torch.ones(1 << 18)
    start, step = time.time(), 0
    while time.time() - start < 120:
        try:
            hvd.allreduce(grad, op=hvd.Sum, name="grad")
        except Exception as exc:  # what the test wants to see
            _report({"error": "%s: %s" % (type(exc).__name__, exc), "time": time.time()})
            return
        step += 1
        if step == 20:
            _report({"steady": True})
        time.sleep(0.01)
    sys.exit(3)


if __name__ == "__main__":
    programs = {"checks": checks, "init_and_allreduce": init_and_allreduce, "train_until_error": train_until_error}
    programs[sys.argv[1]]()
