"""Horovod's ``transformation_edit_fields`` / ``transformation_removed_fields``: the fields a
``transformation_fn`` adds or changes, and those it drops.

Petastorm needed them to build the reader's output schema. The readers here take whatever batch
dict the function returns, so the declaration is not needed to read; it is kept as a contract
instead: every batch the function returns is checked against it on the rank, so a script ported
from Horovod keeps its declaration and learns at the first batch, with the field named, when the
function and the declaration disagree.
"""
from typing import List, Optional, Sequence, Tuple

import numpy as np

# (name, dtype, per-row shape with None for any length, nullable)
EditField = Tuple[str, np.dtype, Optional[Tuple[Optional[int], ...]], bool]


def check_edit_fields(value) -> List[EditField]:
    """Horovod's form, (name, numpy dtype, shape, is_nullable) per field, checked on the driver."""
    fields = []
    for item in value or []:
        if not isinstance(item, (tuple, list)) or len(item) != 4 or not isinstance(item[0], str):
            raise ValueError("transformation_edit_fields: %r is not a (name, numpy dtype, shape, is_nullable) "
                             "tuple, as Horovod's, e.g. ('x2', np.float32, (3,), False)" % (item,))
        name, dtype, shape, nullable = item
        try:
            dtype = np.dtype(dtype)
        except TypeError as exc:
            raise ValueError("transformation_edit_fields: field %r has dtype %r, which numpy does not know (%s); "
                             "pass a numpy dtype such as np.float32" % (name, dtype, exc)) from None
        if shape is not None:
            if not isinstance(shape, (tuple, list)) or any(d is not None and (not isinstance(d, int) or d < 0)
                                                            for d in shape):
                raise ValueError("transformation_edit_fields: field %r has shape %r; pass a tuple of lengths "
                                 "(None for any length) or None" % (name, shape))
            shape = tuple(shape)
        fields.append((name, dtype, shape, bool(nullable)))
    return fields


def check_removed_fields(value) -> List[str]:
    names = list(value or [])
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise ValueError("transformation_removed_fields: %r are not field names; pass a list of strings" % (bad,))
    return names


class DeclaredTransformation:
    """``fn`` whose every returned batch is checked against the declared edits and removals."""

    def __init__(self, fn, edit_fields: Sequence[EditField], removed_fields: Sequence[str]):
        self.fn, self.edit_fields, self.removed_fields = fn, list(edit_fields), list(removed_fields)

    def __call__(self, batch):
        out = self.fn(batch)
        if not hasattr(out, "keys"):
            raise ValueError("transformation_fn returned %s, not a batch dict; with transformation_edit_fields / "
                             "transformation_removed_fields it must return the dict of fields"
                             % type(out).__name__)
        for name in self.removed_fields:
            if name in out:
                raise ValueError("transformation_fn returned field %r, which transformation_removed_fields says it "
                                 "drops: remove it in the function or from transformation_removed_fields" % name)
        for name, dtype, shape, nullable in self.edit_fields:
            if name not in out:
                raise ValueError("transformation_fn's batch has no field %r, which transformation_edit_fields "
                                 "declares (fields: %s): return it or drop its declaration" % (name, sorted(out)))
            self._check_field(name, np.asarray(out[name]), dtype, shape, nullable)
        return out

    @staticmethod
    def _check_field(name, array, dtype, shape, nullable):
        if array.dtype != dtype and not (array.dtype == object and nullable):
            raise ValueError("transformation_fn's field %r has dtype %s, but transformation_edit_fields declares %s: "
                             "cast it in the function or change the declaration" % (name, array.dtype, dtype))
        if shape is None or array.dtype == object:
            return
        row = array.shape[1:]
        if len(row) != len(shape) or any(d is not None and d != r for d, r in zip(shape, row)):
            raise ValueError("transformation_fn's field %r has per-row shape %s, but transformation_edit_fields "
                             "declares %s (None: any length): reshape it in the function or change the declaration"
                             % (name, tuple(row), shape))
