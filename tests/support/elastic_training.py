"""A small PyTorch training loop for elastic tests (run_elastic_local and run_elastic): a linear
model trained on full batches, committed every step, and a chosen worker that SIGKILLs itself at a
chosen point, or whose function raises there (once: ``where="raise"``; on whichever worker holds
rank ``victim``, every time: ``where="raise always"``). Every rank computes the same gradient, so
an undisturbed run's weights do not depend on the number of ranks, and a run that lost a rank must
reach the same weights."""
import time

STEPS = 24


def reference_weights():
    """The weights an undisturbed run reaches: every rank computes the same full-batch gradient,
    so their average, and the model, do not depend on how many ranks there are."""
    import torch
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.25
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().tolist() for p in model.parameters()]


def train(victim, where, victim_step=8, commit_delay=0.0, started_file=None, grow_to=None, grow_wait=180.0):
    import os
    import signal
    import threading

    import torch

    import horovod_spark.torch as hvd
    from horovod_spark.common import config

    worker = config.ELASTIC_WORKER.get()
    doomed = worker == victim

    def die(after=0.0):
        if after:
            threading.Timer(after, os.kill, (os.getpid(), signal.SIGKILL)).start()
        else:
            os.kill(os.getpid(), signal.SIGKILL)

    hvd.init()
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.25
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())

    class State(hvd.elastic.TorchState):
        def save(self):
            if doomed and where == "commit" and self.step == victim_step:
                self.model.weight.data.fill_(1e6)  # half-way through a commit of a wrong value
                die()
            time.sleep(commit_delay)  # (a slower job, so there is time to grow it)
            super().save()

    state = State(model, opt, step=0, sizes=[])
    seen = {"resets": 0}
    state.register_reset_callbacks([lambda: seen.__setitem__("resets", seen["resets"] + 1)])

    @hvd.elastic.run
    def train(state):
        while state.step < STEPS:
            state.model.weight.data.add_(0.0)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(state.model(x), y)
            loss.backward()
            if doomed and where == "step" and state.step == victim_step:
                die()
            if where == "raise" and doomed and state.step == victim_step:
                raise ValueError("a transient failure on worker %d at step %d" % (worker, state.step))
            if where == "raise always" and hvd.rank() == victim and state.step == victim_step:
                raise ValueError("a failure on every rank %d, here worker %d" % (victim, worker))
            if doomed and where == "allreduce" and state.step == victim_step:
                die(after=0.05)  # lands inside the 64 MiB allreduce below
            if where == "allreduce":
                big = hvd.allreduce(torch.ones(16 << 20), op=hvd.Sum, name="big.%d" % state.step)
                assert big[0].item() == hvd.size() and big[-1].item() == hvd.size()
            opt.step()
            ones = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="count")
            state.sizes.append(int(ones.item()))
            state.step += 1
            if seen["resets"] and "resumed_at" not in seen:
                seen["resumed_at"] = time.time()  # the first step done after a reset
            if started_file and state.step == 4 and hvd.rank() == 0:
                open(started_file, "w").close()  # training is under way: the test offers a slot now
            state.commit()
        # Training is done; a job that should grow back keeps committing (which is where a new
        # worker is let in) until it has, however long the cluster takes to offer the slot.
        deadline = time.time() + grow_wait
        while grow_to and hvd.size() < grow_to and time.time() < deadline:
            time.sleep(0.5)
            state.commit()
        return {"weights": [p.detach().tolist() for p in state.model.parameters()], "steps": state.step,
                "sizes": state.sizes, "resets": seen["resets"], "rank": hvd.rank(), "size": hvd.size(),
                "worker": worker, "resumed_at": seen.get("resumed_at")}

    return train(state)


def check_weights(result, reference):
    import numpy as np
    for got, want in zip(result["weights"], reference):
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-4, atol=1e-5)
