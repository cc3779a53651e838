"""A fitted model's predictions for the rows of a pandas DataFrame, in this process, without Spark:
the values ``transform()`` appends for the same rows (same output columns, same types, the classifier
columns included). The MLflow pyfunc model of a fit predicts with it (mlflow_pyfunc.py)."""
import json
import os
from typing import List

import numpy as np

from . import classifier_columns, output_columns
from .persistence import class_of
from .shapes import per_row_shape

MODEL_FILE = "model.bin"
STAGE_FILE = "stage.json"


def save_stage(model, directory: str) -> None:
    """``model``'s class, JSON Params and framework model bytes as two files in ``directory``."""
    stage = {"class": "%s.%s" % (type(model).__module__, type(model).__name__), "params": model.json_params()}
    with open(os.path.join(directory, STAGE_FILE), "w") as f:
        json.dump(stage, f)
    with open(os.path.join(directory, MODEL_FILE), "wb") as f:
        f.write(model.model_bytes())


def load_stage(directory: str):
    """The model ``save_stage`` wrote (a TorchModel, KerasModel or LightningModel)."""
    with open(os.path.join(directory, STAGE_FILE)) as f:
        stage = json.load(f)
    model = class_of(stage["class"])()
    for name, value in stage["params"].items():
        model.set(model.getParam(name), value)
    with open(os.path.join(directory, MODEL_FILE), "rb") as f:
        model.set_model_bytes(f.read())
    return model


def predict_pandas(model, frame):
    """A pandas DataFrame of the prediction columns ``model.transform`` appends, for ``frame``'s rows
    (its index kept): scalars as their Spark types give them, vectors as float64 numpy arrays."""
    import pandas as pd
    features = list(model.getOrDefault("feature_cols") or [])
    missing = [c for c in features if c not in frame.columns]
    if missing:
        raise ValueError("feature column(s) %s are not in the input (columns: %s)" % (missing, list(frame.columns)))
    if len(frame) == 0:
        raise ValueError("the input has no rows: pass at least one row to predict")
    outputs = model.predict_columns([feature_array(frame[c], c) for c in features])
    names = model.resolved_output_cols()
    if len(outputs) != len(names):
        raise ValueError("the model returned %d output(s) but there are %d output column(s) (%s)"
                         % (len(outputs), len(names), names))
    recorded = model.getOrDefault("label_types") or []
    types = recorded if len(recorded) == len(outputs) else [None] * len(outputs)
    columns = {name: _typed(values, output_columns.prediction_type(t, int(np.prod(per_row_shape(values))) == 1))
               for name, values, t in zip(names, outputs, types)}
    mode = classifier_columns.check_mode(model.getOrDefault("classification"))
    if mode:
        raw, probability, prediction = classifier_columns.derive(outputs[0], mode)
        raw_col, probability_col, prediction_col = classifier_columns.column_names(model)
        columns[raw_col] = _vectors(raw)
        columns[probability_col] = _vectors(probability)
        columns[prediction_col] = prediction
    return pd.DataFrame(columns, index=frame.index)


def feature_array(series, name: str) -> np.ndarray:
    """A feature column as transform() feeds it: scalars as they are, arrays per row stacked, Spark
    ML vectors as float32 (as training saw them)."""
    values = series.to_numpy()
    if values.dtype != object:
        return values
    rows: List[np.ndarray] = []
    for value in values:
        if value is None:
            raise ValueError("feature column %r has a null row: drop or fill it first" % name)
        rows.append(value.toArray().astype(np.float32) if hasattr(value, "toArray") else np.asarray(value))
    if len({r.shape for r in rows}) > 1:
        raise ValueError("feature column %r holds rows of different lengths; the model needs a fixed length per row"
                         % name)
    return np.stack(rows)


def _typed(values: np.ndarray, kind: str):
    rows = values.shape[0]
    if kind == output_columns.VECTOR:
        # transform() carries a model's outputs as float32 in a vector of doubles.
        return _vectors(values.reshape(rows, -1).astype(np.float32))
    flat = values.reshape(rows).astype(np.float64)
    if kind in ("tinyint", "smallint", "int", "bigint"):
        return np.round(flat).astype(np.int64)   # half to even, as transform() rounds
    if kind == "boolean":
        return flat != 0
    if kind == "float":
        return flat.astype(np.float32)
    return flat


def _vectors(values: np.ndarray) -> list:
    return [row.astype(np.float64) for row in values.reshape(values.shape[0], -1)]
