"""Adasum written out directly in numpy, to check the core's op=Adasum against.

Two vectors: adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b, computed in float64
and rounded to the tensor's dtype, as the core does. Ranks: a binary tree over rank order, pairs
of neighbours level by level, an unpaired last subtree passed up unchanged (for a power of two
ranks, Horovod's tree). Each tensor is combined on its own.
"""
import numpy as np

_TINY = np.sqrt(np.finfo(np.float64).tiny)  # below it a squared norm counts as zero, as in Horovod


def adasum_pair(a, b):
    dtype = np.result_type(a, b)
    x, y = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    dot, xx, yy = x @ y, x @ x, y @ y
    cx = 1.0 - dot / (2.0 * xx) if xx >= _TINY else 1.0
    cy = 1.0 - dot / (2.0 * yy) if yy >= _TINY else 1.0
    return (cx * x + cy * y).astype(dtype).reshape(np.shape(a))


def adasum_ranks(per_rank):
    """The Adasum of one tensor given by every rank (``per_rank[r]``: rank r's array)."""
    level = [np.asarray(v) for v in per_rank]
    while len(level) > 1:
        level = [adasum_pair(level[i], level[i + 1]) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    return level[0]
