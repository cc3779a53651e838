#!/usr/bin/env python
"""Elastic recovery of local ranks: how long from a rank's SIGKILL to training resumed, and how
much work is lost.

A ``run_elastic_local`` job of ``--np`` ranks trains a small PyTorch model (``--step-ms`` of
compute per step, a commit every ``--commit-every`` steps); one rank kills itself with SIGKILL
after ``--kill-step`` steps. Each survivor notes when its first step after the reset completed.
Printed: the time from the kill to the survivors' collectives failing, to the job re-formed, to
the first step done after the reset, and the steps rolled back.

    python benchmarks/elastic_recovery.py                 # 3 ranks, killed after 23 steps
    python benchmarks/elastic_recovery.py --np 4 --commit-every 10 --repeat 3
"""
import argparse
import json
import os
import platform
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from horovod_spark.launcher.elastic_job import run_elastic_local  # noqa: E402


def _train(kill_step, commit_every, step_ms, steps, mark_file):
    import os
    import signal
    import time

    import torch

    import horovod_spark.torch as hvd
    from horovod_spark.common import config

    hvd.init()
    doomed = config.ELASTIC_WORKER.get() == hvd.size() - 1
    model = torch.nn.Linear(256, 256)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt, step=0)
    times = {"failed": None, "reset": None, "resumed": None, "rolled_back": 0}

    def on_reset():
        times["reset"] = time.time()

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        while state.step < steps:
            if doomed and state.step == kill_step:
                with open(mark_file, "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            start = time.monotonic()
            while time.monotonic() - start < step_ms / 1000.0:
                pass  # the compute of a step
            opt.zero_grad()
            model(torch.randn(32, 256)).sum().backward()
            try:
                opt.step()
            except hvd.HorovodInternalError:
                times["failed"] = time.time()
                times["rolled_back"] = state.step - times.setdefault("committed", 0)
                raise
            state.step += 1
            if times["reset"] is not None and times["resumed"] is None:
                times["resumed"] = time.time()
            if state.step % commit_every == 0:
                times["committed"] = state.step
                state.commit()
        return times

    return train(state)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=3)
    parser.add_argument("--kill-step", type=int, default=23)
    parser.add_argument("--commit-every", type=int, default=5)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    rows = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            mark = os.path.join(tmp, "killed_at")
            results = run_elastic_local(_train, args=(args.kill_step, args.commit_every, args.step_ms, args.steps,
                                                      mark), num_proc=args.np, min_num_proc=1, timeout=300)
            with open(mark) as f:
                killed_at = float(f.read())
        first = results[0]
        rows.append({"to_failure_s": max(r["failed"] for r in results) - killed_at,
                     "to_reset_s": max(r["reset"] for r in results) - killed_at,
                     "to_resumed_s": max(r["resumed"] for r in results) - killed_at,
                     "steps_rolled_back": first["rolled_back"]})
    print("machine: %s, %d cores; %d ranks on this machine, one SIGKILLed after %d steps, commit every %d steps"
          % (platform.processor() or platform.machine(), os.cpu_count(), args.np, args.kill_step, args.commit_every))
    print("| from the kill to | median s | max s |")
    print("| --- | --- | --- |")
    for key, label in (("to_failure_s", "survivors' collectives failed"), ("to_reset_s", "job re-formed (reset done)"),
                       ("to_resumed_s", "first step done after the reset")):
        values = [row[key] for row in rows]
        print("| %s | %.3f | %.3f |" % (label, statistics.median(values), max(values)))
    print("steps rolled back (work lost): %s" % [row["steps_rolled_back"] for row in rows])
    print("BENCH_JSON " + json.dumps(rows))


if __name__ == "__main__":
    main()
