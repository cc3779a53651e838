"""Elastic jobs of local ranks (run_elastic_local + hvd.elastic): a rank SIGKILLed during a step,
during a large allreduce or during a commit is survived by the others, which roll back to their
last commit, re-form the job with fewer ranks and finish with the same model an undisturbed run
computes; fewer ranks than min_num_proc, or more resets than reset_limit, end the job with an error
naming the lost rank; a job grows when slots are offered."""
import time

import pytest

from horovod_spark.exceptions import ElasticJobError
from horovod_spark.launcher.elastic_job import run_elastic_local

STEPS = 24


def _reference_weights():
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


def _train(victim, where, victim_step=8, commit_delay=0.0, started_file=None):
    import os
    import signal
    import threading
    import time

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
        return {"weights": [p.detach().tolist() for p in state.model.parameters()], "steps": state.step,
                "sizes": state.sizes, "resets": seen["resets"], "rank": hvd.rank(), "size": hvd.size(),
                "worker": worker, "resumed_at": seen.get("resumed_at")}

    return train(state)


def _check_weights(result, reference):
    import numpy as np
    for got, want in zip(result["weights"], reference):
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("where", ["step", "allreduce", "commit"])
def test_survivors_of_a_sigkilled_rank_finish_with_the_undisturbed_result(where):
    reference = _reference_weights()
    t0 = time.monotonic()
    results = run_elastic_local(_train, args=(2, where), num_proc=3, min_num_proc=2, timeout=240)
    assert len(results) == 2, results
    for rank, result in enumerate(results):
        assert (result["rank"], result["size"], result["steps"]) == (rank, 2, STEPS), result
        assert result["resets"] == 1, result
        # the committed steps ran with 3 ranks, then the rest with 2; none twice, none skipped
        sizes = result["sizes"]
        assert len(sizes) == STEPS and sizes[:8] == [3] * 8 and set(sizes[8:]) == {2}, sizes
        _check_weights(result, reference)
    assert time.monotonic() - t0 < 120


def test_fewer_ranks_than_min_num_proc_end_the_job_naming_the_lost_rank():
    with pytest.raises(ElasticJobError) as info:
        run_elastic_local(_train, args=(1, "step"), num_proc=2, min_num_proc=2, timeout=120)
    text = str(info.value)
    assert "worker 1 (rank 1)" in text and "SIGKILL" in text and "min_num_proc=2" in text, text


def test_reset_limit_is_honoured():
    with pytest.raises(ElasticJobError) as info:
        run_elastic_local(_train, args=(2, "step"), num_proc=3, min_num_proc=2, reset_limit=0, timeout=120)
    text = str(info.value)
    assert "reset_limit=0" in text and "worker 2 (rank 2)" in text, text


def test_a_job_grows_when_a_slot_is_offered(tmp_path):
    import os
    reference = _reference_weights()
    started = str(tmp_path / "started")

    def slots():  # a third slot appears once training is under way
        return 3 if os.path.exists(started) else 2

    results = run_elastic_local(_train, args=(-1, "none", 0, 0.5, started), num_proc=2, max_num_proc=3,
                                discover_slots=slots, timeout=240)
    assert len(results) == 3, results
    for rank, result in enumerate(results):
        assert (result["rank"], result["size"], result["steps"]) == (rank, 3, STEPS), result
        _check_weights(result, reference)
    # the first two workers trained with 2 ranks, then took the third in without a roll back
    assert results[0]["resets"] == 1 and results[0]["sizes"][0] == 2 and results[0]["sizes"][-1] == 3
    assert results[2]["worker"] == 2 and results[2]["sizes"][-1] == 3



def _train_dying_in_rendezvous():
    import os
    import signal

    from horovod_spark.common import basics, config, rendezvous

    if config.ELASTIC_WORKER.get() == 1:
        exchange = rendezvous.exchange_records

        def die_in_the_second_rendezvous(ident, mine, generation, *args, **kwargs):
            if basics._state["elastic_generation"] > 0:
                os.kill(os.getpid(), signal.SIGKILL)  # as its peers wait for it to re-form the job
            return exchange(ident, mine, generation, *args, **kwargs)

        rendezvous.exchange_records = die_in_the_second_rendezvous
    return _train(2, "step")


def test_a_rank_lost_while_the_job_re_forms_is_survived_too():
    reference = _reference_weights()
    results = run_elastic_local(_train_dying_in_rendezvous, num_proc=3, min_num_proc=1, timeout=240)
    assert len(results) == 1, results
    result = results[0]
    assert (result["rank"], result["size"], result["steps"]) == (0, 1, STEPS), result
    assert result["sizes"][:8] == [3] * 8 and set(result["sizes"][8:]) == {1}, result
    _check_weights(result, reference)


def _raise_on_worker_1():
    import horovod_spark.torch as hvd
    from horovod_spark.common import config

    hvd.init()
    if config.ELASTIC_WORKER.get() == 1:
        raise ValueError("a bug in the training code")
    return _train(-1, "none")


def test_an_exception_in_fn_ends_the_job_with_its_traceback():
    from horovod_spark.exceptions import RankFailedError
    with pytest.raises(RankFailedError) as info:
        run_elastic_local(_raise_on_worker_1, num_proc=2, min_num_proc=1, timeout=120)
    assert "a bug in the training code" in str(info.value) and "worker 1 (rank 1)" in str(info.value)
