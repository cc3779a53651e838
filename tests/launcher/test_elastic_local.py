"""Elastic jobs of local ranks (run_elastic_local + hvd.elastic): a rank SIGKILLed during a step,
during a large allreduce or during a commit is survived by the others, which roll back to their
last commit, re-form the job with fewer ranks and finish with the same model an undisturbed run
computes; fewer ranks than min_num_proc, or more resets than reset_limit, end the job with an error
naming the lost rank; a job grows when slots are offered."""
import time

import pytest
from support.elastic_training import STEPS, check_weights, reference_weights, train

from horovod_spark.exceptions import ElasticJobError
from horovod_spark.launcher.elastic_job import run_elastic_local


@pytest.mark.parametrize("where", ["step", "allreduce", "commit"])
def test_survivors_of_a_sigkilled_rank_finish_with_the_undisturbed_result(where):
    reference = reference_weights()
    t0 = time.monotonic()
    results = run_elastic_local(train, args=(2, where), num_proc=3, min_num_proc=2, timeout=240)
    assert len(results) == 2, results
    for rank, result in enumerate(results):
        assert (result["rank"], result["size"], result["steps"]) == (rank, 2, STEPS), result
        assert result["resets"] == 1, result
        # the committed steps ran with 3 ranks, then the rest with 2; none twice, none skipped
        sizes = result["sizes"]
        assert len(sizes) == STEPS and sizes[:8] == [3] * 8 and set(sizes[8:]) == {2}, sizes
        check_weights(result, reference)
    assert time.monotonic() - t0 < 120


def test_fewer_ranks_than_min_num_proc_end_the_job_naming_the_lost_rank():
    with pytest.raises(ElasticJobError) as info:
        run_elastic_local(train, args=(1, "step"), num_proc=2, min_num_proc=2, timeout=120)
    text = str(info.value)
    assert "worker 1 (rank 1)" in text and "SIGKILL" in text and "min_num_proc=2" in text, text


def test_reset_limit_is_honoured():
    with pytest.raises(ElasticJobError) as info:
        run_elastic_local(train, args=(2, "step"), num_proc=3, min_num_proc=2, reset_limit=0, timeout=120)
    text = str(info.value)
    assert "reset_limit=0" in text and "worker 2 (rank 2)" in text, text


def test_a_job_grows_when_a_slot_is_offered(tmp_path):
    import os
    reference = reference_weights()
    started = str(tmp_path / "started")

    def slots():  # a third slot appears once training is under way
        return 3 if os.path.exists(started) else 2

    results = run_elastic_local(train, args=(-1, "none", 0, 0.5, started), num_proc=2, max_num_proc=3,
                                discover_slots=slots, timeout=240)
    assert len(results) == 3, results
    for rank, result in enumerate(results):
        assert (result["rank"], result["size"], result["steps"]) == (rank, 3, STEPS), result
        check_weights(result, reference)
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
            if basics.elastic_generation() > 0:
                os.kill(os.getpid(), signal.SIGKILL)  # as its peers wait for it to re-form the job
            return exchange(ident, mine, generation, *args, **kwargs)

        rendezvous.exchange_records = die_in_the_second_rendezvous
    return train(2, "step")


def test_a_rank_lost_while_the_job_re_forms_is_survived_too():
    reference = reference_weights()
    results = run_elastic_local(_train_dying_in_rendezvous, num_proc=3, min_num_proc=1, timeout=240)
    assert len(results) == 1, results
    result = results[0]
    assert (result["rank"], result["size"], result["steps"]) == (0, 1, STEPS), result
    assert result["sizes"][:8] == [3] * 8 and set(result["sizes"][8:]) == {1}, result
    check_weights(result, reference)


def test_a_rank_whose_fn_raises_is_lost_and_its_slot_offered_again():
    # As in Horovod's elastic driver, a failed worker is a lost worker: the survivor rolls back to
    # the commit before the failure and the job re-forms with the worker started in its place.
    reference = reference_weights()
    results = run_elastic_local(train, args=(1, "raise"), num_proc=2, min_num_proc=2, discover_slots=lambda: 2,
                                timeout=240)
    assert [r["worker"] for r in results] == [0, 2], results
    for rank, result in enumerate(results):
        assert (result["rank"], result["size"], result["steps"]) == (rank, 2, STEPS), result
        check_weights(result, reference)


def _raise_on_every_worker():
    import horovod_spark.torch as hvd
    from horovod_spark.common import config

    hvd.init()
    raise ValueError("a bug in the training code of worker %d" % config.ELASTIC_WORKER.get())


def test_a_job_whose_every_rank_raises_ends_naming_each_failure():
    with pytest.raises(ElasticJobError) as info:
        run_elastic_local(_raise_on_every_worker, num_proc=2, min_num_proc=1, timeout=120)
    text = str(info.value)
    for worker in (0, 1):
        assert "raised ValueError: a bug in the training code of worker %d" % worker in text, text
    assert "fewer than min_num_proc=1" in text and "Traceback" in text, text


def test_a_lost_rank_below_min_num_proc_is_replaced_when_a_slot_is_offered():
    reference = reference_weights()
    results = run_elastic_local(train, args=(1, "step"), num_proc=2, min_num_proc=2, discover_slots=lambda: 2,
                                timeout=240)
    assert [r["worker"] for r in results] == [0, 2], results  # worker 2 took the place of worker 1
    for rank, result in enumerate(results):
        assert (result["rank"], result["size"], result["steps"]) == (rank, 2, STEPS), result
        check_weights(result, reference)
    assert results[0]["resets"] == 1 and set(results[0]["sizes"]) == {2}
