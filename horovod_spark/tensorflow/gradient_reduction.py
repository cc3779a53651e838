"""Averaging a list of gradients across ranks: shared by DistributedGradientTape and the Keras
DistributedOptimizer.

All dense gradients of a step go through one bridge call (one ``tf.numpy_function`` per step in a
graph), named by position and variable so a step's names repeat every step and the core's
response cache skips negotiation in the steady state. ``IndexedSlices`` are gathered, as in
Horovod, unless ``sparse_as_dense``.
"""
import dataclasses
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from horovod_spark.common.process_sets import ProcessSet, global_process_set
from horovod_spark.tensorflow import _primitives
from horovod_spark.tensorflow._indexed_slices import allreduce_slices
from horovod_spark.tensorflow._op_args import Average, Sum, reduce_op
from horovod_spark.tensorflow.compression import Compression


@dataclasses.dataclass
class ReduceSettings:
    compression: Any = Compression.none
    sparse_as_dense: bool = False
    op: Any = Average
    gradient_predivide_factor: float = 1.0
    num_groups: int = 0
    groups: Optional[Sequence[Sequence[Any]]] = None
    process_set: ProcessSet = global_process_set
    scale_local_gradients: bool = True

    def __post_init__(self):
        self.op = reduce_op(self.op)
        if self.gradient_predivide_factor != 1.0 and self.op != Average:
            raise ValueError("gradient_predivide_factor is only supported with op=Average")
        if isinstance(self.groups, int):  # Horovod >= 0.23 spells num_groups as groups=<int>
            self.num_groups, self.groups = self.groups, None
        if self.num_groups < 0:
            raise ValueError("num_groups must be a non-negative integer, got %r" % (self.num_groups,))
        if self.num_groups and self.groups is not None:
            raise ValueError("give either num_groups or groups, not both")
        if self.groups is not None and not all(isinstance(g, (list, tuple)) for g in self.groups):
            raise ValueError("groups must be an int or a list of lists of variables")

    def scaling(self):
        """(op, prescale, postscale) the core runs: predividing turns Average into a scaled Sum."""
        if self.gradient_predivide_factor == 1.0:
            return self.op, 1.0, 1.0
        f = float(self.gradient_predivide_factor)
        return Sum, 1.0 / f, f / self.process_set.size()


def variable_label(variable):
    """A readable, rank-independent label for a variable (Keras path or TF name)."""
    for attr in ("path", "name"):
        try:
            value = getattr(variable, attr)
        except (AttributeError, ValueError):  # eager tensors have no name
            continue
        if isinstance(value, str) and value:
            return value
    return ""


class LocalSources:
    """Variables whose gradients stay rank-local, by identity; holding them keeps their ids
    meaningful. Shared by the tape, the Keras optimizer and the broadcast callback."""

    def __init__(self, variables=()):
        self._vars, self._ids = [], set()
        for var in variables:
            self.add(var)

    def add(self, var) -> None:
        if id(var) not in self._ids:
            self._ids.add(id(var))
            self._vars.append(var)

    def __contains__(self, var) -> bool:
        return id(var) in self._ids

    def indices(self, variables) -> frozenset:
        """Positions in ``variables`` of the local ones."""
        if not self._ids or variables is None:
            return frozenset()
        return frozenset(i for i, v in enumerate(variables) if id(v) in self._ids)


def local_layer_variables(local_layers):
    """The trainable variables of ``local_layers`` (None, a Keras layer, or a list of them): what
    the Partial* wrappers keep rank-local."""
    if local_layers is None:
        return []
    if not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    return [var for layer in local_layers for var in layer.trainable_weights]


def _index_groups(settings, dense, variables):
    if settings.num_groups:
        return [list(chunk) for chunk in np.array_split(np.array(dense, dtype=np.int64), settings.num_groups)
                if len(chunk)]
    if settings.groups is None:
        return ()
    if variables is None:
        raise ValueError("groups of variables need the variables the gradients belong to")
    position = {id(v): i for i, v in enumerate(variables)}
    dense_set = set(dense)
    groups = []
    for group in settings.groups:
        idx = [position[id(v)] for v in group if id(v) in position and position[id(v)] in dense_set]
        if idx:
            groups.append(idx)
    return groups


def _divide(grad, n):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(n, grad.values.dtype), grad.indices, grad.dense_shape)
    return grad / tf.cast(n, grad.dtype)


def reduce_gradients(grads, settings: ReduceSettings, prefix, variables=None, local=frozenset(),
                     label_names=True):
    """Average (per ``settings``) each gradient across ranks; None stays None.

    ``variables`` (same length as ``grads``) resolve ``groups`` and, with ``label_names``, label
    the collectives; indices in ``local`` are not communicated (scaled by 1/size when
    ``scale_local_gradients``).
    """
    grads = list(grads)
    op, prescale, postscale = settings.scaling()
    ps = settings.process_set
    labels = ([variable_label(v) for v in variables] if variables is not None and label_names
              else [""] * len(grads))
    names = ["%s.%d%s" % (prefix, i, "." + label if label else "") for i, label in enumerate(labels)]
    out = [None] * len(grads)
    dense = []
    for i, g in enumerate(grads):
        if g is None:
            continue
        if i in local:
            out[i] = _divide(g, ps.size()) if settings.scale_local_gradients else g
            continue
        if isinstance(g, tf.IndexedSlices):
            if not settings.sparse_as_dense:
                out[i] = allreduce_slices(g, names[i], op, prescale, postscale, ps)
                continue
            g = tf.convert_to_tensor(g)
        out[i] = g
        dense.append(i)
    if dense:
        compressed, ctxs = zip(*(settings.compression.compress(out[i]) for i in dense))
        position = {i: k for k, i in enumerate(dense)}
        groups = [[position[i] for i in group] for group in _index_groups(settings, dense, variables)]
        reduced = _primitives.allreduce(list(compressed), [names[i] for i in dense], op, prescale, postscale, ps,
                                        groups, differentiable=False)
        for i, r, ctx in zip(dense, reduced, ctxs):
            out[i] = settings.compression.decompress(r, ctx)
    return out
