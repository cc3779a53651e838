"""Gradient compression applied around a collective: ``compress`` before, ``decompress`` after."""
import torch

from horovod_spark.common.compression import Compressor, HalfPrecisionCompressor, NoneCompressor


class FP16Compressor(HalfPrecisionCompressor):
    """Sends floating-point tensors as float16 (half the bytes) and restores their dtype after.

    Non-float tensors pass through unchanged.
    """

    float16 = torch.float16

    @staticmethod
    def halves(tensor) -> bool:
        return tensor.dtype.is_floating_point and tensor.dtype != torch.float16

    @staticmethod
    def cast(tensor, dtype):
        return tensor.to(dtype)


class Compression:
    """The available compressors: ``Compression.none`` and ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor


__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]
