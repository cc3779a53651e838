#!/usr/bin/env python
"""Keras training-step time: horovod_spark's overhead on 1 rank, and 2 ranks against
tf.distribute.MultiWorkerMirroredStrategy on localhost.

    python benchmarks/keras_step.py                  # MLP 784-1024-1024-10, batch 64 per rank
    python benchmarks/keras_step.py --quick          # fewer steps, for a smoke check
    python benchmarks/keras_step.py --hidden 256 --json-out keras_step.json

Stages, each in fresh processes started the way users start them:
1. one process, no launcher: plain Keras vs DistributedOptimizer (size 1), ``model.fit``, and a
   ``tf.function`` custom loop with and without DistributedGradientTape; at size 1 the
   collectives are skipped, so a third variant forces them through ``tf.numpy_function`` and the
   core to show that path's cost; rounds alternate between the variants so drift in machine
   load hits all of them;
2. ``horovod-spark-run -np 2``: the same ``fit`` and custom loop on 2 ranks;
3. two processes with TF_CONFIG (two localhost ports): MultiWorkerMirroredStrategy; stages 2 and
   3 alternate ``--repeats`` times and their epochs are pooled. Keras 3's
   ``fit`` is tried first; where it fails (Keras 3.15 does, in ``_maybe_symbolic_build``) the
   error is reported and the strategy's own custom loop (``strategy.run``) is timed.
Every rank/replica gets the same per-rank batch; each process gets cpus/ranks intra-op threads.
Step time is epoch time / steps, median and minimum over epochs (the slowest rank's, on 2 ranks);
the size-1 overhead is the median ratio of epochs timed side by side.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MARKER = "BENCH_JSON "
TARGET_OVERHEAD = 0.05


# ----------------------------------------------------------------------------- worker side

def _setup(args, ranks):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    threads = args.threads or max(1, (os.cpu_count() or 1) // ranks)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    return tf


def _model(keras, hidden):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((784,)), keras.layers.Dense(hidden, activation="relu"),
                             keras.layers.Dense(hidden, activation="relu"), keras.layers.Dense(10)])


def _dataset(tf, batch, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    x = rng.random((batch * 16, 784), dtype=np.float32)
    y = rng.integers(0, 10, batch * 16)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch, drop_remainder=True).prefetch(4)


def _epoch_timer(keras):
    class EpochTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times = []

        def on_epoch_begin(self, epoch, logs=None):
            self._t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.times.append(time.perf_counter() - self._t0)
    return EpochTimer()


def _fit_epochs(keras, model, ds, args, epochs):
    timer = _epoch_timer(keras)
    model.fit(ds, steps_per_epoch=args.steps, epochs=epochs, verbose=0, callbacks=[timer])
    return timer.times


def _loop_epochs(step, ds, args, epochs):
    it = iter(ds)
    times = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss = step(*next(it))
        float(loss)  # wait for the last step
        times.append(time.perf_counter() - t0)
    return times


def _tape_step(tf, keras, model, opt, tape_wrapper):
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape_wrapper(tape).gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return step


def _compiled(keras, args, optimizer):
    model = _model(keras, args.hidden)
    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _emit(record):
    print(MARKER + json.dumps(record), flush=True)


def _ms(times, steps):
    times = sorted(times)
    return 1000.0 * times[len(times) // 2] / steps


def worker_single(args):
    """Size 1, one process: plain Keras; DistributedOptimizer / DistributedGradientTape as users
    get them (size-1 collectives skipped); and the same traced with collectives forced through
    tf.numpy_function and the core. Rounds alternate between the three."""
    tf = _setup(args, 1)
    import keras

    import horovod_spark.keras as hvd
    import horovod_spark.tensorflow as hvd_tf
    from horovod_spark.tensorflow import _primitives
    hvd.init()
    ds = _dataset(tf, args.batch, 0)
    variants = {"keras": lambda t: t, "horovod_spark": hvd_tf.DistributedGradientTape,
                "horovod_spark_core": hvd_tf.DistributedGradientTape}
    fits, loops = {}, {}
    for label, wrap in variants.items():
        opt = keras.optimizers.SGD(0.01)
        fits[label] = _compiled(keras, args, opt if label == "keras" else hvd.DistributedOptimizer(opt))
        loops[label] = _tape_step(tf, keras, _model(keras, args.hidden), keras.optimizers.SGD(0.01), wrap)
        # The choice is made when the step is traced, which the warm-up epoch does.
        _primitives.SKIP_SINGLE_RANK = label != "horovod_spark_core"
        _fit_epochs(keras, fits[label], ds, args, 1)
        _loop_epochs(loops[label], ds, args, 1)
        _primitives.SKIP_SINGLE_RANK = True
    # One epoch per variant per turn: load from other processes on a shared machine comes in
    # bursts, and the overhead is taken from epochs measured side by side (median of ratios).
    times = {(kind, label): [] for kind in ("fit", "loop") for label in variants}
    labels = list(variants)
    for turn in range(args.rounds * args.epochs):
        for label in labels[turn % 3:] + labels[:turn % 3]:  # rotate, so no variant always goes first
            times["fit", label] += _fit_epochs(keras, fits[label], ds, args, 1)
            times["loop", label] += _loop_epochs(loops[label], ds, args, 1)
    for (kind, label), t in times.items():
        base = times[kind, "keras"]
        ratios = sorted(a / b for a, b in zip(t, base))
        _emit({"stage": "single", "api": kind, "system": label, "ranks": 1, "step_ms": _ms(t, args.steps),
               "min_ms": 1000.0 * min(t) / args.steps, "vs_plain": ratios[len(ratios) // 2] - 1})


def _two_rank_epochs(args):
    """Timed epochs per 2-rank stage: as many in total as one size-1 variant gets, spread over
    the repeats."""
    return max(2, args.epochs * args.rounds // args.repeats)


def worker_hvd(args):
    tf = _setup(args, 2)
    import keras
    import numpy as np

    import horovod_spark.keras as hvd
    import horovod_spark.tensorflow as hvd_tf
    hvd.init()
    ds = _dataset(tf, args.batch, hvd.rank())
    model = _compiled(keras, args, hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)))
    model.fit(ds, steps_per_epoch=args.steps, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    fit_times = _fit_epochs(keras, model, ds, args, _two_rank_epochs(args))
    loop = _tape_step(tf, keras, _model(keras, args.hidden), keras.optimizers.SGD(0.01),
                      hvd_tf.DistributedGradientTape)
    _loop_epochs(loop, ds, args, 1)
    loop_times = _loop_epochs(loop, ds, args, _two_rank_epochs(args))
    for kind, t in (("fit", fit_times), ("loop", loop_times)):
        slowest = hvd.allreduce(np.array(t), op=hvd.Max, name="bench.%s" % kind).numpy()
        if hvd.rank() == 0:
            _emit({"stage": "two", "api": kind, "system": "horovod_spark", "ranks": 2,
                   "epoch_step_ms": [1000.0 * t / args.steps for t in slowest]})


def worker_mwms(args):
    tf = _setup(args, 2)
    import keras
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    workers = strategy.num_replicas_in_sync
    options = tf.data.Options()
    # Each worker feeds its own data (as horovod_spark ranks do); the global batch is split per replica.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = _dataset(tf, args.batch * workers, task).with_options(options)
    with strategy.scope():
        model = _compiled(keras, args, keras.optimizers.SGD(0.01))
    try:
        _fit_epochs(keras, model, ds, args, 1)
        fit_times = _fit_epochs(keras, model, ds, args, _two_rank_epochs(args))
        if task == 0:
            _emit({"stage": "two", "api": "fit", "system": "mwms", "ranks": workers,
                   "epoch_step_ms": [1000.0 * t / args.steps for t in fit_times]})
    except Exception as exc:  # Keras 3.15: ValueError converting a PerReplica batch (see module doc)
        if task == 0:
            _emit({"stage": "two", "api": "fit", "system": "mwms", "ranks": workers,
                   "error": "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:160])})
    with strategy.scope():
        model = _model(keras, args.hidden)
        opt = keras.optimizers.SGD(0.01)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    dist_ds = strategy.experimental_distribute_dataset(ds)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            per_example = loss_fn(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=args.batch * workers)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def step(x, y):
        per_replica = strategy.run(replica_step, args=(x, y))
        return strategy.reduce("SUM", per_replica, axis=None)

    _loop_epochs(step, dist_ds, args, 1)
    loop_times = _loop_epochs(step, dist_ds, args, _two_rank_epochs(args))
    if task == 0:
        _emit({"stage": "two", "api": "loop", "system": "mwms", "ranks": workers,
               "epoch_step_ms": [1000.0 * t / args.steps for t in loop_times]})


# ----------------------------------------------------------------------------- driver side

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _collect(outputs):
    records = []
    for text in outputs:
        for line in text.splitlines():
            at = line.find(MARKER)
            if at >= 0:
                records.append(json.loads(line[at + len(MARKER):]))
    return records


def _run(cmds_envs, timeout):
    procs = [subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for cmd, env in cmds_envs]
    outputs = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        outputs.append(out)
        if p.returncode != 0:
            sys.stderr.write(out[-4000:])
            raise SystemExit("benchmark stage failed: %s (exit %d)" % (" ".join(p.args), p.returncode))
    return _collect(outputs)


def _worker_cmd(role, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--role", role, "--steps", str(args.steps),
           "--epochs", str(args.epochs), "--rounds", str(args.rounds), "--batch", str(args.batch),
           "--hidden", str(args.hidden), "--repeats", str(args.repeats)]
    return cmd + (["--threads", str(args.threads)] if args.threads else [])


def _pool_repeats(records):
    """One record per (api, system): epoch step times pooled over the repeated stages."""
    pooled = {}
    for r in records:
        key = (r["stage"], r["api"], r["system"])
        into = pooled.setdefault(key, {k: v for k, v in r.items() if k != "epoch_step_ms"})
        if "epoch_step_ms" in r:
            into.setdefault("epoch_step_ms", []).extend(r["epoch_step_ms"])
    for r in pooled.values():
        times = sorted(r.get("epoch_step_ms", []))
        if times:
            r.pop("error", None)
            r["step_ms"], r["min_ms"] = times[len(times) // 2], times[0]
    return list(pooled.values())


def _table(records, args):
    by = {(r["stage"], r["api"], r["system"]): r for r in records}
    rows = []
    labels = {"keras": "Keras, no horovod_spark", "horovod_spark": "horovod_spark",
              "horovod_spark_core": "horovod_spark, size-1 collectives forced through the core",
              "mwms": "tf.distribute MultiWorkerMirroredStrategy"}
    for stage, system in (("single", "keras"), ("single", "horovod_spark"), ("single", "horovod_spark_core"),
                          ("two", "horovod_spark"), ("two", "mwms")):
        for api in ("fit", "loop"):
            r = by.get((stage, api, system))
            if r is None:
                continue
            what = "model.fit" if api == "fit" else "custom loop (tf.function)"
            if "error" in r:
                rows.append("| %s | %s | %d | fails: %s | | | |" % (labels[system], what, r["ranks"], r["error"]))
                continue
            ms = r["step_ms"]
            samples = r["ranks"] * args.batch / (ms / 1000.0)
            note = ""
            if stage == "single" and system != "keras":
                note = "%+.1f%% vs plain (median of paired epochs)" % (100.0 * r["vs_plain"])
            if stage == "two" and system == "mwms":
                ours = by.get(("two", api, "horovod_spark"), {}).get("step_ms")
                if ours:
                    note = "horovod_spark %.2fx faster" % (ms / ours)
            rows.append("| %s | %s | %d | %.2f | %.2f | %.0f | %s |"
                        % (labels[system], what, r["ranks"], ms, r["min_ms"], samples, note))
    header = ["| system | API | ranks | step ms (median) | step ms (min) | samples/s (median) | note |",
              "|---|---|---|---|---|---|---|"]
    return "\n".join(header + rows)


def _targets(records):
    by = {(r["stage"], r["api"], r["system"]): r for r in records}
    lines = []
    ours = by.get(("single", "fit", "horovod_spark"))
    if ours and "vs_plain" in ours:
        overhead = ours["vs_plain"]
        lines.append("size-1 overhead of DistributedOptimizer (fit): %+.1f%% (target <= %.0f%%): %s"
                     % (100 * overhead, 100 * TARGET_OVERHEAD, "met" if overhead <= TARGET_OVERHEAD else "NOT met"))
    for api in ("fit", "loop"):
        ours2, theirs = by.get(("two", api, "horovod_spark"), {}), by.get(("two", api, "mwms"), {})
        if "step_ms" in ours2 and "step_ms" in theirs:
            for stat in ("step_ms", "min_ms"):
                lines.append("2 ranks, %s, %s step: horovod_spark %.2f ms vs MWMS %.2f ms (target: faster): %s"
                             % (api, "median" if stat == "step_ms" else "min", ours2[stat], theirs[stat],
                                "met" if ours2[stat] < theirs[stat] else "NOT met"))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=("driver", "single", "hvd", "mwms"), default="driver")
    parser.add_argument("--steps", type=int, default=40, help="steps per timed epoch")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (size 1: variants alternate epoch by epoch)")
    parser.add_argument("--batch", type=int, default=64, help="batch per rank")
    parser.add_argument("--hidden", type=int, default=1024, help="width of the MLP's two hidden layers")
    parser.add_argument("--repeats", type=int, default=3, help="alternations of the two 2-rank stages")
    parser.add_argument("--threads", type=int, default=0, help="TF threads per process (0: cpus / ranks)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.epochs, args.rounds, args.repeats = 20, 2, 2, 1
    if args.role != "driver":
        {"single": worker_single, "hvd": worker_hvd, "mwms": worker_mwms}[args.role](args)
        return

    load_before = os.getloadavg()[0]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    env.pop("HOROVOD_RANK", None)
    records = _run([(_worker_cmd("single", args), env)], args.timeout)
    launcher = [sys.executable, "-m", "horovod_spark.launcher", "-np", "2"]
    two = []
    for _ in range(args.repeats):  # alternate, so drifting load on a shared machine hits both
        two += _run([(launcher + _worker_cmd("hvd", args), env)], args.timeout)
        ports = [_free_port(), _free_port()]
        cluster = {"worker": ["localhost:%d" % p for p in ports]}
        mwms = [(_worker_cmd("mwms", args),
                 dict(env, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})))
                for i in range(2)]
        two += _run(mwms, args.timeout)
    records += _pool_repeats(two)

    print("Keras step time, MLP 784-%d-%d-10, batch %d per rank, %d steps x %d epochs x %d rounds (2 ranks: x %d "
          "alternating repeats), %d CPUs, load average %.1f before / %.1f after"
          % (args.hidden, args.hidden, args.batch, args.steps, args.epochs, args.rounds, args.repeats,
             os.cpu_count() or 0, load_before, os.getloadavg()[0]))
    print(_table(records, args))
    print(_targets(records))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"args": vars(args), "records": records, "load_before": load_before,
                       "load_after": os.getloadavg()[0]}, f, indent=2)


if __name__ == "__main__":
    main()
