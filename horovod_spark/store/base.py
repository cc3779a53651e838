"""The Store interface: a root path, the layout under it, and file operations via pyarrow.fs."""
import posixpath
import uuid
from typing import List, Optional, Union
from urllib.parse import urlparse

from horovod_spark.exceptions import StoreAccessError
from horovod_spark.store.horovod_methods import HorovodStoreMethods

INTERMEDIATE_DATA = "intermediate_data"
RUNS = "runs"
# The dataset of a store that holds one (Horovod's dataset index None).
DEFAULT_DATASET = "default"
DEFAULT_CHECKPOINT_FILENAME = "checkpoint"
# Store's keywords after prefix_path, in Horovod's order.
LAYOUT_KEYWORDS = ("train_path", "val_path", "test_path", "runs_path", "save_runs", "storage_options",
                   "checkpoint_filename")


class Store(HorovodStoreMethods):
    """Base class. Paths handed out and accepted are *store paths*: in the same form as the root
    (a local path, or a URL such as ``hdfs://nn:8020/a/b``). A relative path is taken relative to
    the root. Subclasses provide the filesystem and the mapping to filesystem / Spark paths.

    The keywords after ``prefix_path`` are Horovod's: ``train_path`` / ``val_path`` /
    ``test_path`` put the datasets there instead of under ``intermediate_data/`` (dataset ``idx``
    at ``<path>.<idx>``), ``runs_path`` the runs instead of under ``runs/``; ``save_runs=False``
    keeps no run output in the store (``get_checkpoint_path`` and ``get_logs_path`` answer None);
    ``storage_options`` go to an fsspec filesystem (``FsspecStore``), and ``checkpoint_filename``
    is what ``get_checkpoint_filename()`` answers (default ``'checkpoint'``).
    """

    def __init__(self, prefix_path: str, train_path: Optional[str] = None, val_path: Optional[str] = None,
                 test_path: Optional[str] = None, runs_path: Optional[str] = None, save_runs: bool = True,
                 storage_options: Optional[dict] = None, checkpoint_filename: Optional[str] = None):
        self._root = self._normalize_root(prefix_path)
        self._fs = None
        if not isinstance(save_runs, bool):
            raise TypeError("save_runs must be True or False, got %r" % (save_runs,))
        if storage_options is not None and not isinstance(storage_options, dict):
            raise TypeError("storage_options must be a dict of fsspec options, got %s"
                            % type(storage_options).__name__)
        self._dataset_paths = {kind: self.resolve(_path_option(path, kind + "_path")) if path is not None else None
                               for kind, path in (("train", train_path), ("val", val_path), ("test", test_path))}
        self._runs_path = self.resolve(_path_option(runs_path, "runs_path")) if runs_path is not None else None
        self._save_runs = save_runs
        self.storage_options = dict(storage_options or {})
        self.checkpoint_filename = _path_option(checkpoint_filename, "checkpoint_filename") \
            if checkpoint_filename is not None else DEFAULT_CHECKPOINT_FILENAME

    # -- choosing an implementation -------------------------------------------------------------

    @staticmethod
    def create(prefix_path: str, check: Optional[bool] = None, **kwargs) -> "Store":
        """LocalStore for plain paths and file://, DBFSLocalStore for /dbfs and dbfs:/,
        HDFSStore for hdfs://, FsspecStore for any other URL (s3://, gs://, abfs://, memory://...).
        kwargs go to the chosen class (e.g. ``user=`` for HDFS, storage options for fsspec).

        ``check``: write, read back and delete a probe file under the root now (``check_access``),
        so an unusable path fails here rather than after a Spark job. The default checks local
        and DBFS paths, which need no connection; remote stores are checked when a fit starts."""
        if not isinstance(prefix_path, str) or not prefix_path.strip():
            raise ValueError("Store.create needs a non-empty path or URL, got %r" % (prefix_path,))
        store = _implementation_for(prefix_path)(prefix_path, **kwargs)
        if check if check is not None else store.checked_on_creation():
            store.check_access()
        return store

    @classmethod
    def serves(cls, prefix_path: str) -> bool:
        """Whether ``Store.create`` should pick this class for ``prefix_path`` (an implementation
        registered with ``register_implementation`` says; the most derived class that serves a
        path wins, so ``DBFSLocalStore`` takes ``/dbfs`` paths from ``LocalStore``)."""
        return False

    def checked_on_creation(self) -> bool:
        """Whether ``Store.create`` checks access by default: stores that need no connection say yes."""
        return False

    def check_access(self) -> None:
        """Raise ``StoreAccessError`` unless this process can create the root, write a file under
        it, read it back and delete it. Its first line names the root and the cause."""
        probe = self.join(".horovod_spark-access-check-%s" % uuid.uuid4().hex)
        data = b"horovod_spark store access check"
        step = "create the directory"
        try:
            self.makedirs(self._root)
            step = "write a file in"
            self.write_bytes(probe, data)
            step = "read back a file from"
            if self.read_bytes(probe) != data:
                raise OSError("the file read back differs from what was written")
        except Exception as exc:
            raise StoreAccessError(
                "store path %r is not usable: cannot %s it (%s: %s)\nChoose a directory this process can "
                "write and read (on a cluster, one that every executor reaches too), or fix its permissions."
                % (self._root, step, type(exc).__name__, exc)) from exc
        finally:
            try:
                self.delete(probe)
            except Exception:
                pass

    # -- what subclasses provide ----------------------------------------------------------------

    def _normalize_root(self, prefix_path: str) -> str:
        raise NotImplementedError

    def _make_filesystem(self):
        raise NotImplementedError

    def fs_path(self, path: str) -> str:
        """The path as ``filesystem()`` understands it (pyarrow.dataset, pyarrow.parquet)."""
        raise NotImplementedError

    def to_spark_path(self, path: str) -> str:
        """The path as Spark's DataFrame reader/writer understands it."""
        raise NotImplementedError

    # -- layout -----------------------------------------------------------------------------------

    @property
    def prefix_path(self) -> str:
        return self._root

    def join(self, *parts: str) -> str:
        return posixpath.join(self._root, *parts)

    def get_intermediate_data_path(self) -> str:
        return self.join(INTERMEDIATE_DATA)

    def get_data_path(self, idx: Union[str, int, None] = None) -> str:
        """The directory of dataset ``idx``: a prepared DataFrame's key, Horovod's dataset index
        (an int), or None for the one dataset of a store that holds one."""
        return self.join(INTERMEDIATE_DATA, dataset_name(idx))

    def get_train_data_path(self, idx: Union[str, int, None] = None) -> str:
        return self._dataset_path("train", idx)

    def get_val_data_path(self, idx: Union[str, int, None] = None) -> str:
        return self._dataset_path("val", idx)

    def get_test_data_path(self, idx: Union[str, int, None] = None) -> str:
        return self._dataset_path("test", idx)

    def _dataset_path(self, kind: str, idx) -> str:
        given = self._dataset_paths[kind]
        if given is None:
            return posixpath.join(self.get_data_path(idx), kind)
        return given if idx is None else "%s.%s" % (given, dataset_name(idx))

    def get_data_metadata_path(self, key: Union[str, int, None] = None) -> str:
        return posixpath.join(self.get_data_path(key), "metadata.json")

    def saving_runs(self) -> bool:
        """Whether run output (checkpoints, logs) is kept in the store (``save_runs``)."""
        return self._save_runs

    def get_runs_path(self) -> str:
        return self._runs_path or self.join(RUNS)

    def get_run_path(self, run_id: str) -> str:
        return posixpath.join(self.get_runs_path(), _component(run_id, "run id"))

    def get_checkpoint_path(self, run_id: str) -> Optional[str]:
        """The directory of the run's checkpoints; None when the store keeps no runs."""
        return posixpath.join(self.get_run_path(run_id), "checkpoints") if self._save_runs else None

    def get_logs_path(self, run_id: str) -> Optional[str]:
        """The directory of the run's logs; None when the store keeps no runs."""
        return posixpath.join(self.get_run_path(run_id), self.get_logs_subdir()) if self._save_runs else None

    # -- file operations ------------------------------------------------------------------------

    def filesystem(self):
        """The ``pyarrow.fs.FileSystem`` for this store, created on first use (per process)."""
        if self._fs is None:
            self._fs = self._make_filesystem()
        return self._fs

    def resolve(self, path: str) -> str:
        """A store path for ``path``: absolute paths/URLs are kept, relative ones join the root."""
        if "://" in path or path.startswith("/") or url_scheme(path):
            return path
        return self.join(path)

    def exists(self, path: str) -> bool:
        from pyarrow import fs as pafs
        info = self.filesystem().get_file_info(self.fs_path(self.resolve(path)))
        return info.type != pafs.FileType.NotFound

    def is_dir(self, path: str) -> bool:
        from pyarrow import fs as pafs
        info = self.filesystem().get_file_info(self.fs_path(self.resolve(path)))
        return info.type == pafs.FileType.Directory

    def read_bytes(self, path: str) -> bytes:
        with self.filesystem().open_input_stream(self.fs_path(self.resolve(path))) as f:
            return f.read()

    def write_bytes(self, path: str, data: bytes) -> None:
        target = self.fs_path(self.resolve(path))
        fs = self.filesystem()
        fs.create_dir(posixpath.dirname(target), recursive=True)
        with fs.open_output_stream(target) as f:
            f.write(data)

    def write_bytes_atomic(self, path: str, data: bytes) -> None:
        """Readers see either the old content or all of ``data``, never a partial file: the bytes
        go to a hidden temporary beside the target, which is then renamed over it."""
        target = self.fs_path(self.resolve(path))
        fs = self.filesystem()
        parent, name = posixpath.split(target)
        tmp = posixpath.join(parent, ".%s.tmp-%s" % (name, uuid.uuid4().hex))
        fs.create_dir(parent, recursive=True)
        try:
            with fs.open_output_stream(tmp) as f:
                f.write(data)
            fs.move(tmp, target)
        except BaseException:
            _delete_quietly(fs, tmp)
            raise

    def list(self, path: str) -> List[str]:
        """Store paths of the immediate children of the directory ``path``, sorted."""
        from pyarrow import fs as pafs
        resolved = self.resolve(path)
        infos = self.filesystem().get_file_info(pafs.FileSelector(self.fs_path(resolved)))
        return sorted(posixpath.join(resolved, info.base_name) for info in infos)

    def makedirs(self, path: str) -> None:
        self.filesystem().create_dir(self.fs_path(self.resolve(path)), recursive=True)

    def move(self, src: str, dst: str) -> None:
        fs = self.filesystem()
        target = self.fs_path(self.resolve(dst))
        fs.create_dir(posixpath.dirname(target), recursive=True)
        fs.move(self.fs_path(self.resolve(src)), target)

    def delete(self, path: str) -> None:
        """Remove a file or a directory tree; a missing path is not an error."""
        from pyarrow import fs as pafs
        fs = self.filesystem()
        target = self.fs_path(self.resolve(path))
        kind = fs.get_file_info(target).type
        if kind == pafs.FileType.Directory:
            fs.delete_dir(target)
        elif kind != pafs.FileType.NotFound:
            fs.delete_file(target)

    # -- pickling: stores travel to Spark tasks; filesystem handles do not ---------------------

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_fs"] = None
        return state

    def __setstate__(self, state):
        # A store pickled before the layout keywords existed (in a saved estimator) has the defaults.
        self.__dict__.update(_dataset_paths={"train": None, "val": None, "test": None}, _runs_path=None,
                             _save_runs=True, storage_options={}, checkpoint_filename=DEFAULT_CHECKPOINT_FILENAME)
        self.__dict__.update(state)

    def __repr__(self):
        return "%s(%r)" % (type(self).__name__, self._root)

    def __eq__(self, other):
        return type(self) is type(other) and self._root == other._root and self._layout() == other._layout()

    def __hash__(self):
        return hash((type(self).__name__, self._root))

    def _layout(self):
        return (sorted(self._dataset_paths.items()), self._runs_path, self._save_runs, self.checkpoint_filename)


def url_scheme(path: str) -> str:
    """The URL scheme of ``path``, or '' for a plain path (Windows drive letters included)."""
    scheme = urlparse(path).scheme
    return scheme.lower() if len(scheme) > 1 else ""


def dataset_name(idx: Union[str, int, None]) -> str:
    """The directory name of dataset ``idx`` under ``intermediate_data/``."""
    if idx is None:
        return DEFAULT_DATASET
    if isinstance(idx, bool) or not isinstance(idx, (str, int)):
        raise TypeError("a dataset index is a str key, an int or None, got %r" % (idx,))
    return _component(str(idx), "dataset key")


def _path_option(value, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError("%s must be a non-empty path, got %r" % (what, value))
    return value


def _component(value: str, what: str) -> str:
    if not isinstance(value, str) or not value or "/" in value or value in (".", ".."):
        raise ValueError("a %s must be a non-empty name without '/', got %r" % (what, value))
    return value


def _delete_quietly(fs, path: str) -> None:
    try:
        fs.delete_file(path)
    except (OSError, FileNotFoundError):
        pass


# The classes Store.create chooses among, in registration order. Only registered classes take part,
# so a user's subclass of LocalStore never takes over plain paths by being defined.
_IMPLEMENTATIONS: List[type] = []
_FALLBACK: List[type] = []


def register_implementation(fallback: bool = False):
    """Class decorator: ``Store.create`` considers this class (``fallback``: the one for URLs no
    other registered class serves)."""
    def register(cls):
        (_FALLBACK if fallback else _IMPLEMENTATIONS).append(cls)
        return cls
    return register


def _implementation_for(prefix_path: str) -> type:
    matches = [cls for cls in _IMPLEMENTATIONS if cls.serves(prefix_path)]
    matches = [cls for cls in matches if not any(other is not cls and issubclass(other, cls) for other in matches)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ValueError("Store.create: %s all serve %r; a path must map to one store class"
                         % (", ".join(cls.__name__ for cls in matches), prefix_path))
    return _FALLBACK[0]
