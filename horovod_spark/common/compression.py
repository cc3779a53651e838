"""Gradient compression around a collective, for every framework: ``compress(tensor) -> (tensor,
ctx)`` before it, ``decompress(tensor, ctx) -> tensor`` after. A framework's float16 compressor
subclasses ``HalfPrecisionCompressor`` with its dtype test and cast."""


class Compressor:
    """Interface: ``compress(tensor) -> (tensor, ctx)`` and ``decompress(tensor, ctx) -> tensor``."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class HalfPrecisionCompressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes of float32) and casts them back to
    their dtype after; other dtypes pass through unchanged.

    A framework's subclass supplies ``halves(tensor) -> bool`` (floating point and not float16
    already), ``cast(tensor, dtype)`` and ``float16``, its half-precision dtype."""

    float16 = None

    @staticmethod
    def halves(tensor) -> bool:
        raise NotImplementedError

    @staticmethod
    def cast(tensor, dtype):
        raise NotImplementedError

    @classmethod
    def compress(cls, tensor):
        if cls.halves(tensor):
            return cls.cast(tensor, cls.float16), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else cls.cast(tensor, ctx)
