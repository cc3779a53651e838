"""Whether Petastorm can be used here, and where a store's data is for it.

Released Petastorm (0.12.x, 0.13.x) imports ``pyarrow.filesystem``, which pyarrow 16 removed; and
pyspark 4 needs pyarrow >= 18. So Petastorm runs only on the older stack: pyarrow < 16 (14.0.2
tested) with numpy < 2 and pandas < 3, as pyspark 3.5 uses (requirements-legacy.in). Asking for
it elsewhere raises PetastormUnavailableError saying so, instead of an ImportError from deep inside
Petastorm on a rank.
"""
import importlib

from horovod_spark.exceptions import PetastormUnavailableError

TESTED = "petastorm 0.12.1 with pyarrow 14.0.2, numpy 1.26.4, pandas 2.3.3, pyspark 3.5.9"


def _version(module_name: str) -> str:
    try:
        return getattr(importlib.import_module(module_name), "__version__", "?")
    except Exception:
        return "not installed"


def require_petastorm():
    """The ``petastorm`` module, or PetastormUnavailableError explaining which versions work."""
    try:
        import petastorm
        from petastorm import make_batch_reader  # noqa: F401  (the import that fails on pyarrow >= 16)
        return petastorm
    except Exception as exc:  # ImportError, or e.g. AttributeError from numpy 2 inside its imports
        cause = "%s: %s" % (type(exc).__name__, exc)
    raise PetastormUnavailableError(
        "data_module='petastorm' needs Petastorm, which cannot be imported here (%s). Released Petastorm "
        "imports pyarrow.filesystem, removed in pyarrow 16, so it works only on the older stack: "
        "pyarrow < 16, numpy < 2, pandas < 3 (pyspark 3.5); tested: %s (requirements-legacy.in, "
        "scripts/venv_legacy.sh). This environment has pyarrow %s, numpy %s, pandas %s, pyspark %s, "
        "petastorm %s. Use data_module='arrow' (the built-in reader, which works on both stacks) or "
        "install the older stack." % (cause, TESTED, _version("pyarrow"), _version("numpy"), _version("pandas"),
                                      _version("pyspark"), _version("petastorm")))


def is_available() -> bool:
    try:
        require_petastorm()
        return True
    except PetastormUnavailableError:
        return False


def dataset_url(store, path: str) -> str:
    """The URL Petastorm opens for ``path`` in ``store`` (it resolves filesystems from the scheme)."""
    from horovod_spark.store import FsspecStore, HDFSStore, LocalStore
    if isinstance(store, LocalStore):  # DBFSLocalStore too: its /dbfs FUSE path is local
        return "file://" + store.resolve(path)
    if isinstance(store, (HDFSStore, FsspecStore)):
        return store.resolve(path)
    raise ValueError("data_module='petastorm' cannot read from a %s; use data_module='arrow'" % type(store).__name__)


def storage_options(store):
    """fsspec options for Petastorm (credentials of an s3://, gs://... store), or None."""
    options = getattr(store, "storage_options", None)
    return dict(options) if options else None
