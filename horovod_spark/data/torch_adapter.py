"""Torch tensors from reader batches. The only data module that imports torch, and only when used,
so Keras users of the readers never load it."""
from typing import Iterable, Iterator


def to_torch(batch: dict, device=None, non_blocking: bool = False) -> dict:
    """Dict of numpy arrays -> dict of tensors, sharing memory where the array allows it."""
    import torch
    out = {}
    for name, values in batch.items():
        # from_numpy cannot share read-only memory (Arrow-backed slices); copying beats a warning.
        tensor = torch.from_numpy(values if values.flags.writeable else values.copy())
        out[name] = tensor.to(device, non_blocking=non_blocking) if device is not None else tensor
    return out


def torch_batches(batches: Iterable[dict], device=None, non_blocking: bool = False) -> Iterator[dict]:
    """Wrap a reader iterator; closing this generator closes the reader iterator too."""
    try:
        for batch in batches:
            yield to_torch(batch, device, non_blocking)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
