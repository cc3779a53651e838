"""Spark ML's classifier columns (rawPrediction, probability, prediction) beside a model's own
prediction column, so that Spark's evaluators and tuning classes read a classifier's output as
they read a LogisticRegressionModel's.

Off unless the ``classification`` Param says what the model's (single) output holds:

- 'logits': unnormalised scores. Several per row: rawPrediction = the scores, probability =
  their softmax. One per row (a binary classifier's logit z): rawPrediction = [-z, z],
  probability = [1 - sigmoid(z), sigmoid(z)].
- 'probabilities': class probabilities (a softmax or sigmoid layer ends the model). Several per
  row: both columns are the output. One per row (p of class 1): both are [1 - p, p].

prediction is the index of the most probable class, as a double (what the evaluators read).
"""
from typing import List, Optional, Tuple

import numpy as np

MODES = ("logits", "probabilities")
COLUMN_PARAMS = ("raw_prediction_col", "probability_col", "prediction_col")


def check_mode(value: Optional[str]) -> Optional[str]:
    if value is not None and value not in MODES:
        raise ValueError("classification=%r: pass 'logits' (the model outputs unnormalised scores), "
                         "'probabilities' (it ends with a softmax or sigmoid), or None (no Spark ML classifier "
                         "columns)" % (value,))
    return value


def column_names(stage) -> List[str]:
    """rawPrediction, probability and prediction column names of ``stage``, in that order."""
    return [stage.getOrDefault(name) for name in COLUMN_PARAMS]


def derive(output: np.ndarray, mode: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rawPrediction (rows, classes), probability (rows, classes), prediction (rows,)) as float64
    from a model's output for a batch of rows."""
    rows = output.shape[0]
    values = np.asarray(output, dtype=np.float64).reshape(rows, -1)
    if values.shape[1] == 1:
        score = values[:, 0]
        if mode == "logits":
            # sigmoid as 0.5 * (1 + tanh(z / 2)): no overflow for large |z|
            positive = 0.5 * (1.0 + np.tanh(score / 2.0))
            raw = np.stack([-score, score], axis=1)
        else:
            positive = score
            raw = np.stack([1.0 - score, score], axis=1)
        probability = np.stack([1.0 - positive, positive], axis=1)
    elif mode == "logits":
        raw = values
        shifted = np.exp(values - values.max(axis=1, keepdims=True))
        probability = shifted / shifted.sum(axis=1, keepdims=True)
    else:
        raw = probability = values
    return raw, probability, probability.argmax(axis=1).astype(np.float64)
