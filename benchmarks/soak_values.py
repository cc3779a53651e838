"""Exact numpy arithmetic for the soak's reference values: every dtype the core supports, the
core's rounding rules, and a guard that the values stay where that arithmetic is exact.

Values are held in a "domain" type that represents every value of the dtype exactly and in which
the core does its scaling: float32 for the 8/16-bit integers, float16, bfloat16 and float32
(the core scales those in float, and computes half types in float32), float64 for int32, int64 and
float64 (scaled in double). Inputs are small integers, so every sum, product, minimum and maximum
of three ranks is exact in any order; the only rounding is the one a scale factor makes, and that
is emulated step by step as the core documents it (native/common/reduce.h): x * float(factor) in
the domain type, rounded back to the dtype (to nearest even for float16/bfloat16, toward zero with
saturation for integers).
"""
import numpy as np

DTYPES = ("uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool")
FLOATS = ("float16", "bfloat16", "float32", "float64")
UNSIGNED = ("uint8", "bool")
_WIDE = ("int32", "int64", "float64")


class PlanError(AssertionError):
    """The soak's own arithmetic left the exact range (a flaw in the soak, not in the core)."""


def storage(dtype):
    """numpy storage type of a core dtype; bfloat16 travels as uint16 bit patterns."""
    return np.dtype(np.uint16) if dtype == "bfloat16" else np.dtype(dtype)


def domain(dtype):
    return np.dtype(np.float64) if dtype in _WIDE else np.dtype(bool) if dtype == "bool" else np.dtype(np.float32)


def encode_small_ints(raw, dtype):
    """Storage values of ``raw`` (small integers, exactly representable in every dtype)."""
    if dtype == "bfloat16":
        return (raw.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if dtype == "bool":
        return raw != 0
    return raw.astype(storage(dtype))


def decode(stored, dtype):
    """Storage array -> domain array (exact)."""
    if dtype == "bfloat16":
        return (stored.astype(np.uint32) << 16).view(np.float32)
    return stored.astype(domain(dtype))


def _bfloat16_bits(values32):
    """float32 -> bfloat16 bit patterns, round to nearest even (no NaNs occur here)."""
    bits = values32.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def _int_bounds(dtype):
    info = np.iinfo(dtype)
    return info.min, info.max


def scale(values, dtype, factor):
    """The core's scale_buffer on domain values: the result, back in the domain."""
    if factor == 1.0:
        return values
    if dtype == "bool":
        return values if abs(np.float32(factor)) >= 1 else np.zeros_like(values)
    if dtype in _WIDE:
        product = values * np.float64(factor)
    else:
        product = values * np.float32(factor)
    if dtype in FLOATS:
        return round_to(product, dtype)
    lo, hi = _int_bounds(dtype)
    return np.clip(np.trunc(product), lo, hi)


def round_to(values, dtype):
    """Domain values rounded to the dtype's precision (floats only)."""
    if dtype == "float16":
        return values.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        return decode(_bfloat16_bits(values), dtype)
    return values


def reduce(values, op, dtype):
    """Reduce a list of domain arrays of equal shape (op one of Sum, Min, Max, Product)."""
    stack = np.stack(values)
    if dtype == "bool":
        return stack.any(0) if op in ("Sum", "Max") else stack.all(0)
    return {"Sum": stack.sum, "Min": stack.min, "Max": stack.max, "Product": stack.prod}[op](0)


def encode(values, dtype):
    """Domain values -> storage, refusing any value the dtype cannot hold exactly (PlanError)."""
    if dtype == "bool":
        return values.astype(bool)
    if dtype in FLOATS:
        stored = _bfloat16_bits(values) if dtype == "bfloat16" else values.astype(storage(dtype))
        if not np.array_equal(decode(stored, dtype), values):
            raise PlanError("a %s reference value is not representable exactly" % dtype)
        return stored
    lo, hi = _int_bounds(dtype)
    if values.size and (values.min() < lo or values.max() > hi or not np.array_equal(np.trunc(values), values)):
        raise PlanError("a %s reference value left the exact integer range" % dtype)
    return values.astype(storage(dtype))


def show(stored, dtype):
    """A few storage values as numbers, for failure messages."""
    return decode(np.asarray(stored), dtype).tolist()
