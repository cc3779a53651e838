"""Data and models shared by the KerasEstimator test modules (each has its own SparkSession)."""
import os

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

CLASSES = 3


def classification_df(spark, n=600, seed=0):
    """A dense/sparse 4-vector "vec" and a 4-float array "arr"; label = argmax(W [vec, arr]);
    "is_val" marks a fifth of the rows."""
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql import types as T
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype(np.float32)
    labels = (x @ np.random.default_rng(100).normal(size=(8, CLASSES))).argmax(axis=1)
    rows = []
    for i in range(n):
        v = x[i, :4].astype(float)
        if i % 2:
            v[rng.integers(0, 4)] = 0.0
            vec = Vectors.sparse(4, {j: float(v[j]) for j in range(4) if v[j] != 0.0})
        else:
            vec = Vectors.dense(v.tolist())
        rows.append((vec, [float(a) for a in x[i, 4:]], int(labels[i]), bool(i % 5 == 0)))
    schema = T.StructType([T.StructField("vec", VectorUDT()), T.StructField("arr", T.ArrayType(T.FloatType())),
                           T.StructField("label", T.IntegerType()), T.StructField("is_val", T.BooleanType())])
    return spark.createDataFrame(rows, schema)


def two_input_model(compiled=True, lr=0.05, seed=0):
    """Takes the vector column and the array column as two inputs."""
    import keras
    keras.utils.set_random_seed(seed)
    vec, arr = keras.Input((4,), name="vec"), keras.Input((4,), name="arr")
    joined = keras.layers.Concatenate()([vec, arr])
    out = keras.layers.Dense(CLASSES, activation="softmax")(keras.layers.Dense(16, activation="relu")(joined))
    model = keras.Model([vec, arr], out)
    if compiled:
        model.compile(optimizer=keras.optimizers.Adam(lr), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
    return model


def accuracy(pred_df, output_col="label__output"):
    rows = pred_df.select(output_col, "label").collect()
    predicted = np.array([np.argmax(r[output_col]) for r in rows])
    return float((predicted == np.array([r["label"] for r in rows])).mean())
