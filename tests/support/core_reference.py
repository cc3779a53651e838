"""Deterministic per-rank inputs and numpy references for the core's collectives, so every rank can
rebuild every other rank's input and check its own result without extra communication."""
import os

import numpy as np

DTYPES = ["uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"]
OPS = {"Sum": 1, "Min": 3, "Max": 4, "Product": 5}
TOLERANCE = {"float16": 2e-2, "bfloat16": 8e-2, "float32": 1e-5, "float64": 1e-12}


def storage(dtype):
    """numpy storage type; bfloat16 travels as uint16 bit patterns."""
    return np.uint16 if dtype == "bfloat16" else np.dtype(dtype)


def to_float64(raw, dtype):
    if dtype == "bfloat16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return raw.astype(np.float64)


def make_input(dtype, count, rank, op="Sum", salt=0):
    rng = np.random.default_rng([rank, count, DTYPES.index(dtype), salt])
    if dtype == "bool":
        return rng.integers(0, 2, count).astype(bool)
    if op == "Product":
        # values near 1 (floats) or in {1, 2} (ints) so products of 4 ranks stay representable
        if dtype in TOLERANCE:
            vals = rng.uniform(0.5, 1.5, count)
        else:
            vals = rng.integers(1, 3, count)
    elif dtype in ("uint8", "uint16"):
        vals = rng.integers(0, 60, count)
    elif dtype == "int8":
        vals = rng.integers(-30, 30, count)
    elif dtype in ("int16", "int32", "int64"):
        vals = rng.integers(-1000, 1000, count)
    else:
        vals = rng.uniform(-1, 1, count)
    if dtype == "bfloat16":
        return (vals.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return vals.astype(dtype)


def reduce_reference(inputs, dtype, op):
    if dtype == "bool":
        stack = np.stack(inputs)
        return stack.any(0) if op in ("Sum", "Max") else stack.all(0)
    stack = np.stack([to_float64(x, dtype) for x in inputs])
    return {"Sum": stack.sum(0), "Min": stack.min(0), "Max": stack.max(0),
            "Product": stack.prod(0)}[op]


def matches(result_raw, reference, dtype):
    if dtype == "bool":
        return np.array_equal(result_raw.astype(bool), reference)
    got = to_float64(result_raw, dtype)
    if dtype in TOLERANCE:
        return np.allclose(got, reference, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    return np.array_equal(got, reference)


def pretend_two_hosts():
    """Before init: this rank believes it runs on host<rank // 2>, so pairs of ranks share memory
    and the pairs talk over TCP (a mixed-transport job on one machine)."""
    rank = int(os.environ["HOROVOD_RANK"])
    os.environ["HOROVOD_HOSTNAME"] = "host%d" % (rank // 2)
    for var in ("HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE"):
        os.environ.pop(var, None)
