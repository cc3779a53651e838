"""Part (c) of benchmarks/estimator.py: TorchModel.transform against its peers on one cached DataFrame.

- ours:              TorchModel.transform(df)
- predict_batch_udf: pyspark.ml.functions.predict_batch_udf around the same module (same weights),
                     with transform's rows per forward pass as its batch_size, on transform's own
                     input column (for a vector column: vector_to_array(..., "float32"), as
                     predict_batch_udf takes no vectors)
- floor:             an Arrow UDF with transform's input and output column types that skips the
                     model (zeros for every row): any Arrow-UDF transform costs at least this
- floor + model:     the floor's time plus the module's own compute on the same rows (one thread, as in
                     a Spark Python worker, timed in the driver) spread over the task slots: about the
                     best an Arrow-UDF transform of this model can reach when the CPUs are saturated
- row UDF (opt-in):  a row-at-a-time udf that unpickles the model once per task

Each run writes every row through Spark's ``noop`` sink. The systems take turns, so that a noisy
neighbour slows them alike; the fastest run of each counts, and the CPU seconds of this process
tree (driver, JVM, Python workers) per run show the work done, which load on a shared machine
disturbs far less than wall time.
"""
import collections
import os
import time

import cloudpickle

CLASSES = 10


def _row_udf(model_bytes):
    import numpy as np
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    state = {}

    def predict_row(vector):
        import torch
        if "model" not in state:  # once per task, as a careful hand-written UDF would
            state["model"] = cloudpickle.loads(model_bytes).eval()
        values = vector.toArray() if hasattr(vector, "toArray") else vector  # a Vector, or an array's list
        with torch.no_grad():
            x = torch.from_numpy(np.asarray(values, dtype=np.float32)).unsqueeze(0)
            return state["model"](x)[0].tolist()

    return F.udf(predict_row, T.ArrayType(T.FloatType()))


def _predict_batch_udf(model_bytes, features: int, batch_size: int):
    import numpy as np
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import types as T

    def make_predict_fn():
        import torch
        model = cloudpickle.loads(model_bytes).eval()

        def predict(inputs: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return model(torch.from_numpy(inputs)).numpy()

        return predict

    return predict_batch_udf(make_predict_fn, return_type=T.ArrayType(T.FloatType()), batch_size=batch_size,
                             input_tensor_shapes=[[features]])


def _constant_udf():
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import types as T

    from horovod_spark.estimator.common.spark_compat import scalar_iter_arrow_udf

    def zeros(batches):
        for batch in batches:
            rows = len(batch)
            offsets = pa.array(np.arange(0, (rows + 1) * CLASSES, CLASSES, dtype=np.int32))
            yield pa.ListArray.from_arrays(offsets, pa.array(np.zeros(rows * CLASSES, dtype=np.float32)))

    return scalar_iter_arrow_udf(zeros, T.ArrayType(T.FloatType(), False)).asNondeterministic()


def tree_cpu_seconds(root: int = None) -> float:
    """CPU seconds used so far by ``root`` (this process by default) and every process below it,
    including children already reaped (Linux /proc; 0.0 elsewhere)."""
    if not os.path.isdir("/proc"):
        return 0.0
    root = os.getpid() if root is None else root
    children, ticks = collections.defaultdict(list), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        # After "(comm)": state ppid ... then utime stime cutime cstime as fields 11-14.
        fields = stat[stat.rindex(")") + 2:].split()
        children[int(fields[1])].append(int(entry))
        ticks[int(entry)] = sum(int(v) for v in fields[11:15])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total / os.sysconf("SC_CLK_TCK")


def _noop_write(df):
    """(wall seconds, CPU seconds of this process tree) of writing every row of ``df`` nowhere."""
    cpu, start = tree_cpu_seconds(), time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start, tree_cpu_seconds() - cpu


def transform_batch_size(features: int) -> int:
    """The rows per forward pass that transform uses for ``features`` float32 values a row."""
    import numpy as np

    from horovod_spark.estimator.torch_inference import rows_per_pass
    return rows_per_pass([np.empty((1, features), dtype=np.float32)])


def model_seconds(module, rows: int, features: int, passes: int = 3) -> float:
    """The module's own compute for ``rows`` rows, as one Spark Python worker runs it (one thread,
    transform's rows per forward pass), best of ``passes``: no Arrow UDF transform can beat the
    floor plus this share of the machine's cores."""
    import numpy as np
    import torch
    x = np.random.default_rng(0).random((rows, features), dtype=np.float32)
    step, threads = transform_batch_size(features), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = float("inf")
        for _ in range(passes):
            start = time.perf_counter()
            with torch.inference_mode():
                for i in range(0, rows, step):
                    module(torch.from_numpy(x[i:i + step]))
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return best


def compare(df, fitted, rows: int, features: int, repeats: int, row_udf: bool = False):
    """{system: {"runs": [(wall s, CPU s), ...], "rows_per_s": best}} on ``df``, cached here so
    every system measures inference, not the DataFrame's lineage."""
    from pyspark.sql import functions as F

    from horovod_spark.estimator.common.model import _model_input
    df = df.cache()
    df.count()
    model_bytes = cloudpickle.dumps(fitted.getModel())
    # transform's own input expression (a vector column becomes float32 arrays) for the peers.
    model_input = _model_input("features", df.schema["features"].dataType)
    systems = {
        "ours": lambda: fitted.transform(df),
        "predict_batch_udf": lambda: df.withColumn("label__output", _predict_batch_udf(
            model_bytes, features, transform_batch_size(features))(model_input)),
        "floor": lambda: df.withColumn("label__output", _constant_udf()(F.struct(model_input.alias("features")))),
    }
    if row_udf:
        systems["row UDF"] = lambda: df.withColumn("label__output", _row_udf(model_bytes)("features"))
    for make in systems.values():
        _noop_write(make())  # warm-up: Python workers, torch import, model caches
    runs = {name: [] for name in systems}
    for _ in range(repeats):
        for name, make in systems.items():
            # The row UDF takes seconds a run; the others well under one, so they run 3 times per
            # repeat to average out the JVM's JIT and scheduling noise.
            for _ in range(1 if name == "row UDF" else 3):
                runs[name].append(_noop_write(make()))
    df.unpersist()
    results = {name: {"runs": r, "rows_per_s": rows / min(wall for wall, _ in r),
                      "cpu_s": min(cpu for _, cpu in r)} for name, r in runs.items()}
    cores = df.sparkSession.sparkContext.defaultParallelism
    model = model_seconds(fitted.getModel(), rows, features)
    floor_seconds = rows / results["floor"]["rows_per_s"]
    results["bound"] = {"model_seconds": model, "cores": cores, "rows_per_s": rows / (floor_seconds + model / cores)}
    return results


def format_rows(results, rows: int, features: int, arrow_batch_rows) -> str:
    """The (c) table: one line per feature column type."""
    lines = ["| (c) transform, %d rows | ours rows/s | predict_batch_udf rows/s | floor rows/s | floor + model "
             "rows/s | ours / predict_batch_udf | ours / floor | ours / (floor + model) | CPU s a run: ours, "
             "predict_batch_udf, floor |" % rows, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for column, r in results.items():
        ours, peer, floor, bound = r["ours"], r["predict_batch_udf"], r["floor"], r["bound"]
        lines.append("| %s column | %.0f | %.0f | %.0f | %.0f | %.2fx | %.2fx | %.2fx | %.2f, %.2f, %.2f |" % (
            column, ours["rows_per_s"], peer["rows_per_s"], floor["rows_per_s"], bound["rows_per_s"],
            ours["rows_per_s"] / peer["rows_per_s"], ours["rows_per_s"] / floor["rows_per_s"],
            ours["rows_per_s"] / bound["rows_per_s"], ours["cpu_s"], peer["cpu_s"], floor["cpu_s"]))
    lines.append("")
    for column, r in results.items():
        lines.append("every (c) run on the %s column, wall s: %s" % (column, "; ".join(
            "%s %s" % (name, " / ".join("%.2f" % wall for wall, _ in s["runs"]))
            for name, s in r.items() if name != "bound")))
        lines.append("the model alone on the %s column's rows: %.3f s on one thread; floor + model = floor time + "
                     "that / %d cores" % (column, r["bound"]["model_seconds"], r["bound"]["cores"]))
        if "row UDF" in r:
            lines.append("row-at-a-time UDF, %s column: %.0f rows/s (ours %.1fx)" % (
                column, r["row UDF"]["rows_per_s"], r["ours"]["rows_per_s"] / r["row UDF"]["rows_per_s"]))
    lines.append("rows per forward pass (ours) = predict_batch_udf batch_size = %d; Arrow batches of %s rows; "
                 "%d float32 features" % (transform_batch_size(features), arrow_batch_rows, features))
    return "\n".join(lines)
