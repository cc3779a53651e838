"""``horovod_spark.lightning``: PyTorch Lightning on horovod_spark's core.

``HorovodStrategy`` is a Lightning ``Strategy`` for ``lightning.pytorch.Trainer(strategy=...)``
in every rank of a job (``horovod_spark.run``, ``run_local``, ``horovod-spark-run``); see
docs/lightning.md. ``HorovodEnvironment`` is the ClusterEnvironment that reports the job's ranks.

Lightning is optional (``pip install 'horovod_spark[lightning]'``): importing this package does
not import it; the first use of a name that needs it does, and raises ImportError naming that
extra when Lightning is missing.
"""
from horovod_spark.lightning.requirement import EXTRA, INSTALL_HINT, require_lightning

_LAZY = {
    "HorovodStrategy": "horovod_spark.lightning.strategy",
    "HorovodEnvironment": "horovod_spark.lightning.environment",
}


def __getattr__(name):
    if name in _LAZY:
        require_lightning("horovod_spark.lightning.%s" % name)
        import importlib
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = ["HorovodStrategy", "HorovodEnvironment", "EXTRA", "INSTALL_HINT", "require_lightning"]
