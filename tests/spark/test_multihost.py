"""horovod_spark.run and the estimators on a Spark standalone cluster of 3 separate hosts.

The hosts are network namespaces (tests/support/netns_hosts.py), each with its own address,
hostname and one 2-core worker; the driver is this process, in the root namespace, reaching them
over the bridge. So ranks on one host share memory, ranks on different hosts talk TCP over their
own network stacks, and local/cross ranks come from real hostnames.
"""
import os
import sys
import time

import cloudpickle
import numpy as np
import pytest
from support import multihost_checks
from support.netns_hosts import hosts_fixture
from support.standalone_cluster import StandaloneCluster

import horovod_spark

pyspark = pytest.importorskip("pyspark")

pytestmark = pytest.mark.timeout(600)

HOSTS, CORES = 3, 2
NUM_PROC = HOSTS * CORES

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(multihost_checks)

netns_hosts = hosts_fixture(HOSTS)


@pytest.fixture(scope="module")
def standalone(netns_hosts):
    with StandaloneCluster(netns_hosts, cores=CORES) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark_master(standalone):
    return standalone.master_url


@pytest.fixture(scope="module")
def spark_conf(standalone):
    return standalone.driver_conf()


@pytest.fixture(scope="module", autouse=True)
def executors_registered(spark, standalone):
    """Every host's executor registered with the driver before the first job: on a loaded machine
    an executor JVM can take longer to start than the run's own slot wait (HOROVOD_SPARK_SLOT_WAIT)."""
    jsc = spark.sparkContext._jsc.sc()
    deadline = time.monotonic() + 180
    while jsc.getExecutorIds().size() < HOSTS:
        if time.monotonic() > deadline:
            pytest.fail("only %d of %d executors registered within 180 s; worker logs:\n%s"
                        % (jsc.getExecutorIds().size(), HOSTS, standalone.log_tails()))
        time.sleep(0.5)


def _placement_links_and_collectives():
    import horovod_spark.torch as hvd
    hvd.init()
    seen = multihost_checks.placement_and_links()
    seen["checks"] = multihost_checks.collectives()
    return seen


def test_placement_links_and_every_collective_across_three_hosts(spark, netns_hosts):
    seen = horovod_spark.run(_placement_links_and_collectives, num_proc=NUM_PROC, verbose=0)
    hosts = [s["host"] for s in seen]
    assert sorted(hosts) == sorted(netns_hosts.names * CORES), hosts  # 2 ranks on each host
    order = list(dict.fromkeys(hosts))
    addr_of = {netns_hosts.name(i): netns_hosts.addr(i) for i in range(HOSTS)}
    for rank, s in enumerate(seen):
        local = [r for r, h in enumerate(hosts) if h == s["host"]]
        assert (s["rank"], s["size"]) == (rank, NUM_PROC)
        assert (s["local_rank"], s["local_size"]) == (local.index(rank), CORES), s
        assert (s["cross_rank"], s["cross_size"]) == (order.index(s["host"]), HOSTS), s
        # Peers on other hosts: three TCP connections each (liveness, control, data); peers on the
        # same host: only the liveness connection, data goes through shared memory.
        want = {addr_of[h]: 3 * hosts.count(h) for h in order if h != s["host"]}
        want[addr_of[s["host"]]] = CORES - 1
        got = {ip: c for ip, c in s["tcp_by_ip"].items() if ip in addr_of.values()}
        assert got == want, (rank, s["host"], got, want)
        assert s["shm"], "rank %d maps no shared-memory segment though it shares a host" % rank
        failed = {k: v for k, v in s["checks"].items() if v is not True}
        assert not failed, failed
        assert "join_last" in s["checks"] and "alltoall" in s["checks"]


def test_torch_estimator_fits_across_three_hosts(spark, tmp_path):
    torch = pytest.importorskip("torch")
    from pyspark.ml.linalg import Vectors

    from horovod_spark.estimator import TorchEstimator
    from horovod_spark.store import Store
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 4))
    labels = (x[:, 0] - x[:, 1] > 0).astype(int)
    df = spark.createDataFrame([(Vectors.dense(row.tolist()), int(y)) for row, y in zip(x, labels)],
                               ["features", "label"]).repartition(3)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    est = TorchEstimator(num_proc=NUM_PROC, model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.05),
                         loss=torch.nn.functional.cross_entropy, feature_cols=["features"], label_cols=["label"],
                         validation=0.2, metrics=["accuracy"], batch_size=16, epochs=3, random_seed=0,
                         store=Store.create(str(tmp_path / "store")), verbose=0)
    model = est.fit(df)
    assert model.getHistory()["val_accuracy"][-1] > 0.85, model.getHistory()
    rows = model.transform(df).select("label__output", "label").collect()
    assert np.mean([np.argmax(r["label__output"]) == r["label"] for r in rows]) > 0.85


def test_keras_estimator_fits_across_three_hosts(spark, tmp_path):
    pytest.importorskip("keras")
    from support.keras_data import accuracy, classification_df, two_input_model

    from horovod_spark.estimator import KerasEstimator
    from horovod_spark.store import Store
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    df = classification_df(spark, n=600).repartition(3)
    est = KerasEstimator(num_proc=NUM_PROC, model=two_input_model(lr=0.05), feature_cols=["vec", "arr"],
                         label_cols=["label"], validation="is_val", batch_size=16, epochs=3, random_seed=2,
                         store=Store.create(str(tmp_path / "store")), verbose=0)
    model = est.fit(df)
    assert model.getHistory()["loss"][-1] < model.getHistory()["loss"][0]
    assert accuracy(model.transform(df)) > 0.75


def _train_and_mark(directory):
    import os
    import time

    import torch

    import horovod_spark.torch as hvd
    hvd.init()
    grad = torch.ones(1 << 18)
    for step in range(100000):
        hvd.allreduce(grad, op=hvd.Sum, name="grad")
        if step == 20:
            open(os.path.join(directory, "rank-%d" % hvd.rank()), "w").close()
        time.sleep(0.01)


def test_cut_link_fails_the_run_naming_the_lost_host(spark, netns_hosts, tmp_path):
    """Runs last: cutting a host's link disturbs the cluster for what would come after."""
    import threading
    import time

    from horovod_spark.spark import HorovodSparkError
    cut = {}

    def cut_when_training():
        deadline = time.monotonic() + 120
        while len(os.listdir(tmp_path)) < NUM_PROC and time.monotonic() < deadline:
            time.sleep(0.1)
        cut["at"] = time.monotonic()
        netns_hosts.link_down(HOSTS - 1)

    cutter = threading.Thread(target=cut_when_training, daemon=True)
    cutter.start()
    try:
        with pytest.raises(HorovodSparkError) as failure:
            horovod_spark.run(_train_and_mark, args=(str(tmp_path),), num_proc=NUM_PROC, verbose=0)
        raised = time.monotonic()
    finally:
        cutter.join(timeout=5)
        netns_hosts.link_up(HOSTS - 1)
    assert "at" in cut, "the ranks never reported that they were training: %s" % failure.value
    lost = netns_hosts.name(HOSTS - 1)
    assert lost in str(failure.value) and "stopped answering" in str(failure.value), str(failure.value)
    assert raised - cut["at"] < 20, "run() raised %.1f s after the link was cut" % (raised - cut["at"])
