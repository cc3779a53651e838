"""How a KerasEstimator saves the Params that are not JSON (its objects_to_bytes hook): the model in
Keras' own format, with the arguments it was compiled with so that it loads compiled (a compiled
model may stand in for the optimizer, loss and metrics Params); Keras optimizers as their class and
config, the way Keras itself rebuilds them; everything else cloudpickled."""
import inspect

import cloudpickle

from .keras_io import model_from_bytes, model_to_bytes
from .keras_payload import compiled_with

FORMAT = 1


def _optimizer_recipe(optimizer):
    return type(optimizer), optimizer.get_config()


def _optimizer_from(recipe):
    cls, config = recipe
    return cls.from_config(dict(config))


def objects_to_bytes(objects: dict) -> bytes:
    import keras
    rest = dict(objects)
    doc = {"format": FORMAT}
    model = rest.pop("model", None)
    if model is not None:
        doc["model"] = model_to_bytes(model)
        compiled = compiled_with(model)
        if isinstance(compiled.get("optimizer"), keras.optimizers.Optimizer):
            compiled["optimizer"] = _optimizer_recipe(compiled["optimizer"])
        doc["compiled"] = compiled
    if isinstance(rest.get("optimizer"), keras.optimizers.Optimizer):
        doc["optimizer"] = _optimizer_recipe(rest.pop("optimizer"))
    doc["objects"] = rest
    return cloudpickle.dumps(doc)


def objects_from_bytes(data: bytes) -> dict:
    doc = cloudpickle.loads(data)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError("these bytes are not a horovod_spark KerasEstimator's saved objects (format %r, expected %r)"
                         % (doc.get("format") if isinstance(doc, dict) else type(doc).__name__, FORMAT))
    objects = dict(doc["objects"])
    if "optimizer" in doc:
        objects["optimizer"] = _optimizer_from(doc["optimizer"])
    if "model" in doc:
        model = model_from_bytes(doc["model"], objects.get("custom_objects"))
        compiled = dict(doc.get("compiled") or {})
        if compiled:
            if isinstance(compiled.get("optimizer"), tuple):
                compiled["optimizer"] = _optimizer_from(compiled["optimizer"])
            accepted = inspect.signature(model.compile).parameters
            model.compile(**{k: v for k, v in compiled.items() if k in accepted})
        objects["model"] = model
    return objects
