"""Save/load of estimators with Spark ML's layout, so that a Pipeline holding an unfitted estimator,
CrossValidator and TrainValidationSplit save and load:

    <path>/metadata/   DefaultParamsWriter JSON: class, uid, the Params whose values are JSON
    <path>/objects/    one-row Parquet file: the other Params' values (model, optimizer, loss,
                       callbacks, functions ...) as bytes from the framework's hook

Every Param set on the estimator is saved, as Horovod's estimators save theirs, with two
exceptions: ``backend`` is not saved (a runtime object, as in Horovod: a loaded estimator runs
with num_proc), and ``store`` is saved as its class and root path, without constructor options
such as credentials or storage options (Horovod saves no store at all).

The objects travel through the estimator's ``objects_to_bytes`` / ``objects_from_bytes`` hooks
(estimator.HorovodEstimator): all of them in one call, so objects that share state keep sharing
it when loaded (a torch optimizer holds the model's own parameters).
"""
import warnings

from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReader

from .persistence import (
    FORMAT_VERSION,
    HorovodWriter,
    class_of,
    is_json_value,
    join_path,
    metadata_target,
    new_instance,
    read_blob,
    write_blob,
)

OBJECTS_DIR = "objects"
# Params whose values are not saved (Horovod saves neither); store is saved by store_record instead.
NOT_SAVED = ("backend", "store")


def store_record(store):
    """{"class", "prefix_path"} that rebuilds ``store``, or None. Constructor options beyond the
    path (credentials, storage options, an HDFS user) are not saved; a warning says so."""
    if store is None:
        return None
    cls = type(store)
    name = "%s.%s" % (cls.__module__, cls.__qualname__)
    try:
        rebuilt = cls(store.prefix_path)
        same = {k: v for k, v in vars(rebuilt).items() if k != "_fs"} == \
            {k: v for k, v in vars(store).items() if k != "_fs"}
    except Exception:
        rebuilt, same = None, False
    if rebuilt is None:
        warnings.warn("the estimator's store %r cannot be rebuilt from its path alone, so it is not saved: set the "
                      "store again after loading (est.setStore(...))" % (store,), stacklevel=4)
        return None
    if not same:
        warnings.warn("the estimator's store %r is saved as its path only: its other constructor options "
                      "(credentials, storage options, user ...) stay out of the saved files. Set the store again "
                      "after loading if it needs them (est.setStore(...))" % (store,), stacklevel=4)
    return {"class": name, "prefix_path": store.prefix_path}


def rebuild_store(record):
    if record is None:
        return None
    return class_of(record["class"])(record["prefix_path"])


class HorovodEstimatorWriter(HorovodWriter):
    def saveImpl(self, path: str) -> None:
        instance = self.instance
        json_params, objects = {}, {}
        for param in instance.params:
            if instance.isSet(param) and param.name not in NOT_SAVED:
                value = instance.getOrDefault(param)
                (json_params if is_json_value(value) else objects)[param.name] = value
        store = instance.getOrDefault("store") if instance.isSet("store") else None
        extra = {"horovod_spark": {"format_version": FORMAT_VERSION, "framework": instance.framework,
                                   "stage": "estimator", "objects": sorted(objects), "store": store_record(store)}}
        DefaultParamsWriter.saveMetadata(instance, path, metadata_target(self), extraMetadata=extra,
                                         paramMap=json_params)
        if objects:
            data = instance.objects_to_bytes(objects)
            write_blob(self.sparkSession, data, join_path(path, OBJECTS_DIR))


class HorovodEstimatorReader(MLReader):
    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def load(self, path: str):
        metadata = DefaultParamsReader.loadMetadata(path, metadata_target(self))
        info = metadata.get("horovod_spark") or {}
        if info.get("format_version") != FORMAT_VERSION or info.get("stage") != "estimator":
            raise ValueError("%s was not saved by a horovod_spark estimator of this version (format %r, stage %r; "
                             "expected format %r, stage 'estimator')"
                             % (path, info.get("format_version"), info.get("stage"), FORMAT_VERSION))
        instance = new_instance(self.cls, path, metadata)
        if info.get("objects"):
            data = read_blob(self.sparkSession, join_path(path, OBJECTS_DIR))
            for name, value in type(instance).objects_from_bytes(data).items():
                instance.set(instance.getParam(name), value)
        store = rebuild_store(info.get("store"))
        if store is not None:
            instance.set(instance.getParam("store"), store)
        return instance
