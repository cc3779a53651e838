"""Worker-side functions of TorchModel.transform(), importable so the UDF closure stays small."""
import io

import cloudpickle
import numpy as np


def load_model(data: bytes):
    model = cloudpickle.load(io.BytesIO(data))
    model.eval()
    return model


def predict(model, inputs):
    import torch
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    tensors = []
    for values in inputs:
        values = np.ascontiguousarray(values)
        tensor = torch.from_numpy(values if values.flags.writeable else values.copy())
        if tensor.is_floating_point() or tensor.dtype == torch.bool:
            tensor = tensor.to(dtype)
        tensors.append(tensor)
    with torch.inference_mode():
        result = model(*tensors)
    outputs = list(result) if isinstance(result, (list, tuple)) else [result]
    return [o.detach().cpu().numpy() for o in outputs]
