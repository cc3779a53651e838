"""Batch arrays -> the shapes the model takes and returns, shared by training and transform()
so that a model sees exactly the same input layout in both."""
from typing import List, Optional, Sequence

import numpy as np


def model_inputs(arrays: Sequence[np.ndarray], shapes: Optional[Sequence[Sequence[int]]]) -> List[np.ndarray]:
    """Each feature as (rows, *shape). Without a configured shape a scalar column becomes (rows, 1),
    the layout of a Linear layer's input, and an array/vector column stays (rows, n)."""
    out = []
    for i, values in enumerate(arrays):
        rows = len(values)
        if shapes is not None:
            out.append(_reshape(values, (rows,) + tuple(shapes[i]), "input_shapes", i))
        elif values.ndim == 1:
            out.append(values.reshape(rows, 1))
        else:
            out.append(values)
    return out


def label_arrays(arrays: Sequence[np.ndarray], shapes: Optional[Sequence[Sequence[int]]]) -> List[np.ndarray]:
    """Labels as stored ((rows,) for scalars, which class-index losses want), or (rows, *shape)."""
    if shapes is None:
        return list(arrays)
    return [_reshape(values, (len(values),) + tuple(shapes[i]), "label_shapes", i) for i, values in enumerate(arrays)]


def _reshape(values: np.ndarray, shape, param: str, index: int) -> np.ndarray:
    try:
        return values.reshape(shape)
    except ValueError:
        raise ValueError("%s[%d] = %s does not fit the column's rows of %d value(s) each: the per-row shape must "
                         "hold exactly that many values (without input_shapes, a Keras model's declared input "
                         "shapes are used)" % (param, index, list(shape[1:]), int(np.prod(values.shape[1:])))) from None


def per_row_shape(values) -> List[int]:
    return [int(d) for d in values.shape[1:]]
