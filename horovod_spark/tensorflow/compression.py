"""Gradient compression around a collective: ``compress`` before it, ``decompress`` after."""
import tensorflow as tf

from horovod_spark.common.compression import Compressor, HalfPrecisionCompressor, NoneCompressor


class FP16Compressor(HalfPrecisionCompressor):
    """Sends floating-point tensors as float16 (half the bytes of float32) and casts back after.

    Other dtypes pass through unchanged.
    """

    float16 = tf.float16

    @staticmethod
    def halves(tensor) -> bool:
        return tensor.dtype.is_floating and tensor.dtype != tf.float16

    @staticmethod
    def cast(tensor, dtype):
        return tf.cast(tensor, dtype)


class Compression:
    """The available compressors: ``Compression.none`` and ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor


__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]
