"""The Petastorm data module, on both stacks with one local[2] SparkSession.

Main stack (pyarrow >= 16): asking for it fails at once, saying which versions work. Older stack
(pyspark 3.5, pyarrow 14, Petastorm 0.12): its shards are Petastorm's row-group shards, it keeps
the Arrow reader's batch/steps contract (both modules give the same rows per epoch), validation
reads each shard exactly once, and both estimators train with it end to end.
"""
import sys

import cloudpickle
import numpy as np
import pytest

from horovod_spark.data import make_reader, petastorm_support, prepare_data
from horovod_spark.data.petastorm_support import PetastormUnavailableError
from horovod_spark.store import Store

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import functions as F  # noqa: E402

pytestmark = [pytest.mark.timeout(600), pytest.mark.legacy_stack]

HAVE_PETASTORM = petastorm_support.is_available()
needs_petastorm = pytest.mark.skipif(not HAVE_PETASTORM, reason="Petastorm imports only on the older stack "
                                     "(pyarrow < 16): scripts/run_tests.sh runs this module there too")
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return Store.create(str(tmp_path_factory.mktemp("store")))


def _dataset(spark, store, rows, files, per_file_groups=1):
    """Rows with a unique "id", a 3-float array and an int label, in ``files`` Parquet files of
    about ``per_file_groups`` row groups each (small row groups: Parquet's minimum block size)."""
    df = spark.range(rows, numPartitions=files).select(
        F.col("id"), F.array(*[(F.col("id") * (k + 1)).cast("float") for k in range(3)]).alias("arr"),
        (F.col("id") % 3).cast("int").alias("label"))
    row_group_bytes = max(64 * 1024, (rows // files) * 24 // per_file_groups)
    return prepare_data(store, df, ["id", "arr"], ["label"], num_proc=2, num_files=files,
                        row_group_bytes=row_group_bytes)


def _epoch_ids(reader, epoch):
    ids, shapes = [], set()
    with reader.iter_epoch(epoch) as batches:
        for batch in batches:
            ids.extend(batch["id"].tolist())
            shapes.add((batch["arr"].shape, batch["arr"].dtype.name, batch["label"].dtype.name))
            np.testing.assert_array_equal(batch["arr"][:, 1], batch["id"].astype(np.float32) * 2)
    return ids, shapes


# -- the main stack: a clear error ---------------------------------------------------------------------

@pytest.mark.skipif(HAVE_PETASTORM, reason="Petastorm imports here (the older stack)")
def test_asking_for_petastorm_where_it_cannot_import_says_which_versions_work(tmp_path):
    import pyarrow
    with pytest.raises(PetastormUnavailableError) as info:
        make_reader("petastorm", store=Store.create(str(tmp_path)), path="anything", batch_size=4)
    message = str(info.value)
    assert "pyarrow < 16" in message and "numpy < 2" in message and "petastorm 0.12.1" in message
    assert "pyarrow %s" % pyarrow.__version__ in message
    assert "requirements-legacy.in" in message and "data_module='arrow'" in message
    assert isinstance(info.value, ImportError)


# -- the older stack: Petastorm for real -----------------------------------------------------------

@needs_petastorm
def test_shards_are_petastorms_row_group_shards(spark, store):
    """Uneven shards (5 files of different sizes): each rank reads exactly the row groups its
    own_rows counts, once per pass, and pads its epoch up to the largest shard."""
    import pyarrow.dataset as ds
    data = _dataset(spark, store, rows=1000, files=5)
    fragments = sorted(ds.dataset(data.train_path, format="parquet").get_fragments(), key=lambda f: f.path)
    groups = [g.to_table(columns=["id"]).column("id").to_pylist()
              for f in fragments for g in f.split_by_row_group()]
    for rank in range(2):
        mine = sorted(i for g in groups[rank::2] for i in g)
        # One row per batch and one step per row: exactly one pass over the shard.
        reader = make_reader("petastorm", store=store, path=data.train_path, batch_size=1, rank=rank, num_ranks=2,
                             shuffle=False, steps_per_epoch=len(mine))
        assert reader.own_rows == len(mine)
        ids, _ = _epoch_ids(reader, 0)
        assert sorted(ids) == mine
    shard_sizes = [sum(len(g) for g in groups[r::2]) for r in range(2)]
    assert shard_sizes[0] != shard_sizes[1], "the data should give uneven shards"
    readers = [make_reader("petastorm", store=store, path=data.train_path, batch_size=32, rank=r, num_ranks=2, seed=3)
               for r in range(2)]
    steps = -(-max(shard_sizes) // 32)
    assert [r.steps_per_epoch for r in readers] == [steps, steps]
    for rank, reader in enumerate(readers):
        ids, _ = _epoch_ids(reader, 1)
        assert len(ids) == steps * 32
        assert set(ids) == {i for g in groups[rank::2] for i in g}, "a rank padded its epoch with other rows"


@needs_petastorm
def test_both_data_modules_give_the_same_rows_per_epoch(spark, store):
    """Balanced row groups: per rank and epoch the same number of batches, of the same shapes and
    dtypes, and over the ranks every row exactly once, in each of two epochs."""
    data = _dataset(spark, store, rows=1200, files=4)
    per_module = {}
    for module in ("arrow", "petastorm"):
        readers = [make_reader(module, store=store, path=data.train_path, batch_size=50, rank=r, num_ranks=2, seed=5,
                               columns=["id", "arr", "label"]) for r in range(2)]
        assert [r.steps_per_epoch for r in readers] == [12, 12]
        epochs = []
        for epoch in range(2):
            per_rank = [_epoch_ids(r, epoch) for r in readers]
            ids = [i for rank_ids, _ in per_rank for i in rank_ids]
            assert [len(rank_ids) for rank_ids, _ in per_rank] == [600, 600]
            assert sorted(ids) == list(range(1200)), "%s epoch %d did not cover every row once" % (module, epoch)
            epochs.append(set().union(*(shapes for _, shapes in per_rank)))
        per_module[module] = epochs
    assert per_module["arrow"] == per_module["petastorm"] == [{((50, 3), "float32", "int32")}] * 2


@needs_petastorm
def test_validation_reads_each_shard_exactly_once_and_transforms(spark, store):
    from horovod_spark.estimator.common.rank_data import val_batches
    data = _dataset(spark, store, rows=1000, files=5)

    def double_label(batch):
        return dict(batch, label=batch["label"] * 2)

    seen = []
    for rank in range(2):
        reader = make_reader("petastorm", store=store, path=data.train_path, batch_size=64, rank=rank, num_ranks=2,
                             shuffle=False, transformation_fn=double_label)
        batches = list(val_batches(reader, 0, rank, 2, None))
        ids = np.concatenate([b["id"] for b in batches])
        assert len(ids) == reader.own_rows and len(set(ids.tolist())) == len(ids)
        for b in batches:
            np.testing.assert_array_equal(b["label"], (b["id"] % 3) * 2)
        seen.extend(ids.tolist())
    assert sorted(seen) == list(range(1000))


@needs_petastorm
def test_fewer_row_groups_than_ranks_reads_everything_on_every_rank(spark, store):
    data = _dataset(spark, store, rows=90, files=1)
    readers = [make_reader("petastorm", store=store, path=data.train_path, batch_size=10, rank=r, num_ranks=2)
               for r in range(2)]
    for reader in readers:
        assert reader.own_rows == 90 and reader.steps_per_epoch == 9
        ids, _ = _epoch_ids(reader, 0)
        assert sorted(ids) == list(range(90))


@needs_petastorm
def test_both_estimators_train_with_petastorm(spark, tmp_path):
    import keras
    import torch
    from support.keras_data import accuracy, classification_df, two_input_model

    from horovod_spark.estimator import KerasEstimator, TorchEstimator
    df = classification_df(spark, n=400).cache()
    keras_model = KerasEstimator(num_proc=2, model=two_input_model(), feature_cols=["vec", "arr"],
                                 label_cols=["label"], batch_size=32, epochs=4, validation=0.2, random_seed=1,
                                 store=Store.create(str(tmp_path / "keras")), data_module="petastorm",
                                 verbose=0).fit(df)
    assert len(keras_model.getHistory()["val_loss"]) == 4
    assert accuracy(keras_model.transform(df)) > 0.8

    class TwoInputNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 3)

        def forward(self, vec, arr):
            return self.fc(torch.cat([vec, arr], dim=1))

    torch.manual_seed(0)
    net = TwoInputNet()
    torch_model = TorchEstimator(num_proc=2, model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.05),
                                 loss=torch.nn.functional.cross_entropy, feature_cols=["vec", "arr"],
                                 label_cols=["label"], batch_size=32, epochs=4, validation=0.2, random_seed=1,
                                 store=Store.create(str(tmp_path / "torch")), data_module="petastorm",
                                 verbose=0).fit(df)
    assert len(torch_model.getHistory()["val_loss"]) == 4
    assert accuracy(torch_model.transform(df)) > 0.8
    assert keras.backend.backend() == "tensorflow"
