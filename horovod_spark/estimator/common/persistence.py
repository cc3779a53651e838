"""Save/load of fitted models with Spark ML's layout, so PipelineModel can hold them:

    <path>/metadata/   DefaultParamsWriter JSON: class, uid, JSON-valued Params (history included)
    <path>/model/      one-row Parquet file holding the framework model's bytes

Both parts go through Spark, so any path Spark can write (local, hdfs://, dbfs:/, s3a://) works
with the same code, and ``write().overwrite()`` uses Spark's own overwrite handling.
"""
import importlib
import json

from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReader, MLWriter

from horovod_spark.session import is_connect_session

FORMAT_VERSION = 1
_MODEL_DIR = "model"


def is_json_value(value) -> bool:
    """Whether ``value`` survives a JSON round trip unchanged (so Spark ML metadata can hold it)."""
    try:
        return json.loads(json.dumps(value)) == value
    except (TypeError, ValueError):
        return False


def join_path(path: str, name: str) -> str:
    return path.rstrip("/") + "/" + name


def class_of(qualified_name: str):
    """The class a saved stage's metadata names ("package.module.Class")."""
    module, _, name = qualified_name.rpartition(".")
    return getattr(importlib.import_module(module), name)


def write_blob(session, data: bytes, path: str) -> None:
    """``data`` as a one-row Parquet file under ``path`` (what save() writes beside the metadata)."""
    session.createDataFrame([(bytearray(data),)], "blob binary").coalesce(1).write.parquet(path)


def read_blob(session, path: str) -> bytes:
    """What ``write_blob`` wrote under ``path``."""
    return bytes(session.read.parquet(path).first()[0])


def new_instance(expected_cls, path: str, metadata: dict):
    """The stage ``metadata`` describes, with its uid and JSON Params; refused unless it is an
    ``expected_cls`` (the class whose ``load`` was called)."""
    cls = class_of(metadata["class"])
    if not issubclass(cls, expected_cls):
        raise ValueError("%s holds a %s, not a %s" % (path, metadata["class"], expected_cls.__name__))
    instance = cls()
    instance._resetUid(metadata["uid"])
    DefaultParamsReader.getAndSetParams(instance, metadata)
    return instance


def metadata_target(rw):
    """What DefaultParams{Writer,Reader} get: the SparkContext, as pyspark 3.5 (the older stack) takes
    only a context; a Spark Connect session has none, and pyspark 4 takes the session instead."""
    session = rw.sparkSession
    return session if is_connect_session(session) else rw.sc


class HorovodWriter(MLWriter):
    """The writer of every horovod_spark stage: Spark's, with a clear error for what Spark Connect cannot do."""

    def __init__(self, instance):
        super().__init__()
        self.instance = instance

    def save(self, path: str) -> None:
        if self.shouldOverwrite and is_connect_session(self.sparkSession):
            raise ValueError("write().overwrite() cannot run over Spark Connect: Spark's overwrite handling runs "
                             "in the driver's JVM, which a Spark Connect client cannot call. Save to a new path, or "
                             "delete %s first" % path)
        super().save(path)


class HorovodModelWriter(HorovodWriter):
    def saveImpl(self, path: str) -> None:
        instance = self.instance
        data = instance.model_bytes()
        extra = {"horovod_spark": {"format_version": FORMAT_VERSION, "framework": instance.framework}}
        DefaultParamsWriter.saveMetadata(instance, path, metadata_target(self), extraMetadata=extra,
                                         paramMap=instance.json_params())
        write_blob(self.sparkSession, data, join_path(path, _MODEL_DIR))


class HorovodModelReader(MLReader):
    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def load(self, path: str):
        metadata = DefaultParamsReader.loadMetadata(path, metadata_target(self))
        info = metadata.get("horovod_spark") or {}
        if info.get("format_version") != FORMAT_VERSION:
            raise ValueError("%s was not saved by a horovod_spark model of this version (format %r, expected %r)"
                             % (path, info.get("format_version"), FORMAT_VERSION))
        instance = new_instance(self.cls, path, metadata)
        instance.set_model_bytes(read_blob(self.sparkSession, join_path(path, _MODEL_DIR)))
        return instance
