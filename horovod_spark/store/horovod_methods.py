"""The methods Horovod's stores offer user code and remote trainers, with Horovod's meaning, on top of
``Store``'s pyarrow file system: reading and writing files, the run's checkpoints, Parquet datasets,
a local output directory synced into the run, and the store as an fsspec filesystem (``fs``).

Every function handed out (``sync_fn``, ``get_local_output_dir_fn``, ``get_full_path_fn``,
``to_remote``) pickles, so it can travel to a Spark task with the store.
"""
import functools
import os
import posixpath
import tempfile
import types
from typing import Callable, List, Optional


class HorovodStoreMethods:
    """Mixed into ``Store``; relies on its ``resolve``, ``fs_path``, ``to_spark_path``,
    ``filesystem``, ``read_bytes``, ``write_bytes``, ``list`` and layout methods."""

    # -- files ------------------------------------------------------------------------------------

    def read(self, path: str) -> bytes:
        """The contents of ``path`` as bytes."""
        return self.read_bytes(path)

    def write_text(self, path: str, text: str) -> None:
        """Write ``text`` (UTF-8) to the file ``path``, replacing it."""
        if not isinstance(text, str):
            raise TypeError("write_text writes a str, got %s; use write_bytes for bytes" % type(text).__name__)
        self.write_bytes(path, text.encode("utf-8"))

    def copy(self, lpath: str, rpath: str, recursive: bool = False, callback=None, **kwargs) -> None:
        """Upload the local file or directory ``lpath`` to the store path ``rpath`` (a directory's
        contents go into ``rpath``, not into a subdirectory of it; ``recursive`` takes its
        subdirectories too), replacing files that exist. ``callback``: an fsspec ``Callback``
        told the number of files and each one copied."""
        if kwargs:
            raise TypeError("copy() got unexpected keyword(s) %s" % ", ".join(sorted(kwargs)))
        pairs = _local_files(lpath, rpath, recursive)
        if callback is not None:
            callback.set_size(len(pairs))
        for local, remote in pairs:
            with open(local, "rb") as f:
                self.write_bytes(remote, f.read())
            if callback is not None:
                callback.relative_update(1)

    # -- the filesystem as Horovod handed it out ------------------------------------------------

    @property
    def fs(self):
        """The store's filesystem as an fsspec ``AbstractFileSystem`` (Horovod's ``store.fs``); it
        takes ``get_localized_path`` paths. ``filesystem()`` is the same as a ``pyarrow.fs`` one."""
        try:
            from fsspec.implementations.arrow import ArrowFSWrapper
        except ImportError as exc:
            raise ImportError("Store.fs is an fsspec filesystem: pip install fsspec (or horovod_spark[store]), or "
                              "use store.filesystem(), the same filesystem as pyarrow.fs") from exc
        return ArrowFSWrapper(self.filesystem())

    def get_filesystem(self):
        """``fs``: the store's filesystem as an fsspec filesystem."""
        return self.fs

    def get_localized_path(self, path: str) -> str:
        """``path`` as the filesystem (``fs``, ``filesystem()``) takes it: without scheme and host."""
        return self.fs_path(path)

    def get_full_path(self, path: str) -> str:
        """``path`` as a full URL, as Spark reads and writes it."""
        return self.to_spark_path(path)

    def get_full_path_fn(self) -> Callable[[str], str]:
        """A function of a path giving ``get_full_path(path)`` (it pickles, with the store)."""
        return self.get_full_path

    @classmethod
    def matches(cls, path: str) -> bool:
        """Whether ``path`` is one this kind of store serves (``Store.create`` picks among them)."""
        return cls.serves(path)

    # -- Parquet ------------------------------------------------------------------------------------

    def get_parquet_dataset(self, path: str):
        """The ``pyarrow.parquet.ParquetDataset`` of the Parquet files under ``path``."""
        import pyarrow.parquet as pq
        return pq.ParquetDataset(self.fs_path(self.resolve(path)), filesystem=self.filesystem())

    def is_parquet_dataset(self, path: str) -> bool:
        """Whether ``path`` is the root of a Parquet dataset holding at least one file."""
        try:
            return bool(self.get_parquet_dataset(path).files)
        except Exception:  # missing, not Parquet, unreadable: not a dataset, as Horovod answers
            return False

    # -- runs -----------------------------------------------------------------------------------------

    def get_checkpoint_filename(self) -> str:
        """The file name a trainer of user code gives its checkpoint (``checkpoint_filename``)."""
        return self.checkpoint_filename

    def get_logs_subdir(self) -> str:
        """The name of the logs directory in a run's directory."""
        return "logs"

    def get_checkpoints(self, run_id: str, suffix: str = ".ckpt") -> List[str]:
        """The store paths of the run's checkpoint files whose names end with ``suffix``, sorted
        (the estimators' ``epoch-NNNNN.ckpt``: oldest first); empty when there are none."""
        directory = self.get_checkpoint_path(run_id)
        if directory is None or not self.is_dir(directory):
            return []
        return sorted(path for path in self.list(directory) if path.endswith(suffix))

    def get_local_output_dir_fn(self, run_id: str) -> Callable:
        """A function returning a context manager of a fresh local directory (removed on exit),
        where a rank writes the run's output before ``sync_fn``'s function copies it in."""
        return tempfile.TemporaryDirectory

    def sync_fn(self, run_id: str) -> Callable[[str], None]:
        """A function of a local directory that copies its files, subdirectories included, into
        the run's directory, replacing what is there."""
        return functools.partial(_sync_into_run, self, self.get_run_path(run_id))

    def to_remote(self, run_id: str, dataset_idx=None):
        """The store's paths for ``run_id`` and dataset ``dataset_idx``, and its sync functions, as
        plain attributes of one picklable object for a remote trainer."""
        return types.SimpleNamespace(
            train_data_path=self.get_train_data_path(dataset_idx), val_data_path=self.get_val_data_path(dataset_idx),
            test_data_path=self.get_test_data_path(dataset_idx), saving_runs=self.saving_runs(),
            runs_path=self.get_runs_path(), run_path=self.get_run_path(run_id),
            checkpoint_path=self.get_checkpoint_path(run_id), logs_path=self.get_logs_path(run_id),
            checkpoint_filename=self.get_checkpoint_filename(), logs_subdir=self.get_logs_subdir(),
            get_local_output_dir=self.get_local_output_dir_fn(run_id), sync=self.sync_fn(run_id))


def _sync_into_run(store, run_path: str, local_run_path: str) -> None:
    store.copy(local_run_path, run_path, recursive=True)


def _local_files(lpath: str, rpath: str, recursive: bool) -> List[tuple]:
    """(local file, store path) pairs for copying ``lpath`` to ``rpath``."""
    if os.path.isfile(lpath):
        return [(lpath, rpath)]
    if not os.path.isdir(lpath):
        raise FileNotFoundError("copy: no local file or directory %r" % lpath)
    pairs = []
    for directory, subdirs, files in os.walk(lpath):
        relative = os.path.relpath(directory, lpath)
        if not recursive:
            subdirs.clear()
        for name in sorted(files):
            parts: Optional[str] = None if relative == "." else relative.replace(os.sep, "/")
            pairs.append((os.path.join(directory, name), posixpath.join(rpath, parts, name) if parts
                          else posixpath.join(rpath, name)))
    return pairs
