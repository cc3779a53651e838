"""hvd.elastic.ElasticSampler: the sharding of an epoch's indices (pure index logic, many sizes), the
sampler on real ranks, and an elastic job whose rank is SIGKILLed mid-epoch: the survivors re-shard
what the epoch has not processed, so every sample is trained exactly once per epoch."""
import pytest

pytest.importorskip("torch")

from horovod_spark.launcher import run_local  # noqa: E402
from horovod_spark.launcher.elastic_job import run_elastic_local  # noqa: E402
from horovod_spark.torch.elastic.sampler import epoch_order, shard  # noqa: E402


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("length", [0, 1, 5, 12, 13, 50])
def test_shards_are_equal_and_cover_every_remaining_index(size, length):
    remaining = [(i * 7919) % 101 for i in range(length)]  # distinct, in no particular order
    shards = [shard(remaining, size, rank) for rank in range(size)]
    per_rank = -(-length // size)
    assert all(len(s) == per_rank for s in shards), shards
    taken = [i for s in shards for i in s]
    assert sorted(set(taken)) == sorted(remaining)
    # the padding repeats the first remaining indices, cycling when there are fewer than the ranks
    padding = per_rank * size - length
    repeats = sorted(taken)
    for i in set(remaining):
        repeats.remove(i)
    assert sorted(repeats) == sorted((remaining * size)[:padding])
    assert padding < size


def test_shards_are_rank_strided_slices_of_the_order():
    assert [shard(list(range(10)), 3, r) for r in range(3)] == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]


def _simulate_epoch(length, sizes, batch, batches_before_reset):
    """Index logic of an epoch with resets: ``sizes[k]`` ranks process ``batches_before_reset[k]``
    batches in step (each rank its shard's batch), then the job re-forms with ``sizes[k + 1]``
    ranks and shards what is left; the last size runs to the end. Returns how often each index was
    trained and the padding of the last sharding (padding sits in the shards' last batch, which
    the earlier shardings never reach)."""
    order = epoch_order(length, True, 3, 0)
    processed, counts = set(), {}
    for k, size in enumerate(sizes):
        remaining = [i for i in order if i not in processed]
        shards = [shard(remaining, size, r) for r in range(size)]
        padding = len(shards[0]) * size - len(remaining)
        steps = -(-len(shards[0]) // batch)
        for b in range(batches_before_reset[k] if k < len(batches_before_reset) else steps):
            for s in shards:
                for i in s[b * batch:(b + 1) * batch]:
                    counts[i] = counts.get(i, 0) + 1
                    processed.add(i)
    return counts, padding


@pytest.mark.parametrize("sizes,cuts", [((3, 2), (3,)), ((4, 3, 1), (2, 5)), ((2, 3), (4,)), ((5, 4, 2), (1, 1)),
                                        ((1, 6), (7,))])
def test_an_epoch_with_resets_trains_every_index_once_besides_padding(sizes, cuts):
    counts, padding = _simulate_epoch(97, sizes, 4, cuts)
    assert sorted(counts) == list(range(97))
    assert sum(counts.values()) == 97 + padding and padding < sizes[-1], (counts, padding)


def test_an_epoch_with_resets_that_divide_evenly_trains_every_index_exactly_once():
    counts, padding = _simulate_epoch(96, (3, 2), 4, (5,))
    assert padding == 0 and counts == {i: 1 for i in range(96)}


def test_epoch_order_is_a_permutation_fixed_by_seed_and_epoch():
    assert epoch_order(20, False, 0, 5) == list(range(20))
    a = epoch_order(20, True, 1, 0)
    assert sorted(a) == list(range(20)) and a == epoch_order(20, True, 1, 0)
    assert a != epoch_order(20, True, 1, 1) and a != epoch_order(20, True, 2, 0)


def _sampler_on_ranks():
    import horovod_spark.torch as hvd

    hvd.init()
    sampler = hvd.elastic.ElasticSampler(list(range(10)), shuffle=False)
    first = (list(sampler), len(sampler))
    sampler.record_batch(0, 2)  # batch 0 of every rank's shard
    after_batch = sorted(sampler.processed_indices)
    sampler.load_state_dict(sampler.state_dict())
    resharded = list(sampler)
    sampler.record_indices([hvd.rank() + 100])
    sampler.set_epoch(1)
    return {"first": first, "after_batch": after_batch, "resharded": resharded,
            "epoch_1": (sampler.epoch, sorted(sampler.processed_indices), len(sampler))}


def test_the_sampler_on_three_ranks():
    results = run_local(_sampler_on_ranks, num_proc=3, timeout=120)
    assert [r["first"] for r in results] == [([0, 3, 6, 9], 4), ([1, 4, 7, 0], 4), ([2, 5, 8, 1], 4)]
    assert all(r["after_batch"] == [0, 1, 2, 3, 4, 5] for r in results)
    assert [r["resharded"] for r in results] == [[6, 9], [7, 6], [8, 7]]
    assert all(r["epoch_1"] == (1, [], 4) for r in results)


DATASET, BATCH, EPOCHS = 96, 4, 2


def _train_with_sampler(victim, victim_epoch, victim_batch, grow_file=None):
    import os
    import signal
    import time

    import torch

    import horovod_spark.torch as hvd
    from horovod_spark.common import config

    hvd.init()
    worker = config.ELASTIC_WORKER.get()
    dataset = torch.utils.data.TensorDataset(torch.arange(DATASET, dtype=torch.float32).unsqueeze(1),
                                             torch.arange(DATASET))
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=7)
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    model = torch.nn.Linear(1, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1e-4),
                                   named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=0, trained=[])
    sizes_after_reset = []
    state.register_reset_callbacks([lambda: sizes_after_reset.append(hvd.size())])

    @hvd.elastic.run
    def train(state):
        while state.epoch < EPOCHS:
            for batch_idx, (x, idx) in enumerate(loader):
                if batch_idx % 2 == 0:
                    state.commit()
                if worker == victim and state.epoch == victim_epoch and batch_idx == victim_batch:
                    os.kill(os.getpid(), signal.SIGKILL)
                if grow_file and state.epoch == 0 and batch_idx == 4 and hvd.size() == 2:
                    # offer a third slot and commit until the new rank is in (the commit raises then)
                    open(grow_file, "w").close()
                    deadline = time.time() + 120
                    while time.time() < deadline:
                        time.sleep(0.2)
                        state.commit()
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
                # every rank's batch of this step: the samples the model was trained on
                state.trained.append((state.epoch, sum(hvd.allgather_object(idx.tolist()), [])))
                state.sampler.record_batch(batch_idx, BATCH)
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()
        return {"trained": state.trained, "sizes_after_reset": sizes_after_reset, "size": hvd.size()}

    return train(state)


@pytest.mark.parametrize("victim_epoch,victim_batch", [(0, 3), (1, 6)])
def test_a_rank_killed_mid_epoch_leaves_no_sample_skipped_or_repeated(victim_epoch, victim_batch):
    results = run_elastic_local(_train_with_sampler, args=(2, victim_epoch, victim_batch), num_proc=3,
                                min_num_proc=2, timeout=240)
    assert len(results) == 2, results
    assert results[0]["trained"] == results[1]["trained"]
    for result in results:
        assert result["size"] == 2 and result["sizes_after_reset"] == [2], result
    for epoch in range(EPOCHS):
        seen = sorted(i for e, batch in results[0]["trained"] if e == epoch for i in batch)
        assert seen == list(range(DATASET)), (epoch, seen)
    # the reset happened mid-epoch: some steps of the victim's epoch ran with 3 ranks, the rest with 2
    steps = [len(batch) for e, batch in results[0]["trained"] if e == victim_epoch]
    assert 3 * BATCH in steps and 2 * BATCH in steps, steps


def test_a_rank_added_mid_epoch_takes_a_share_of_what_is_left(tmp_path):
    import os
    grow_file = str(tmp_path / "grow")
    results = run_elastic_local(_train_with_sampler, args=(-1, -1, -1, grow_file), num_proc=2, max_num_proc=3,
                                discover_slots=lambda: 3 if os.path.exists(grow_file) else 2, timeout=240)
    assert len(results) == 3 and all(r["size"] == 3 for r in results), results
    trained = results[0]["trained"]
    assert all(r["trained"] == trained for r in results)
    # epoch 0: 4 steps of 2 ranks (32 samples), then 64 left over 3 ranks, padded to 66
    epoch_0 = [i for e, batch in trained if e == 0 for i in batch]
    assert [len(b) for e, b in trained if e == 0][:5] == [2 * BATCH] * 4 + [3 * BATCH], trained
    assert sorted(set(epoch_0)) == list(range(DATASET)) and len(epoch_0) == DATASET + 2, epoch_0
    epoch_1 = sorted(i for e, batch in trained if e == 1 for i in batch)
    assert epoch_1 == list(range(DATASET))
