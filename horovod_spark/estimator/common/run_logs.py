"""A fit's logs on a rank: a local directory its writers (TensorBoard event files, Lightning's
loggers) write to, and its copy in the store's ``runs/<run_id>/logs``.

A local store's logs directory is written in place. Any other store gets a scratch directory whose
files ``sync`` copies into the store the way checkpoints reach it (``write_bytes_atomic``), so a
remote store never holds half a file and a reader of the store sees every completed epoch.
"""
import os
import posixpath
import shutil
import tempfile

from horovod_spark.store import LocalStore


class RunLogs:
    def __init__(self, store, run_id: str):
        self.store = store
        # None when the store keeps no runs: the files are then written locally and copied nowhere.
        self.target = store.get_logs_path(run_id)
        self.in_place = isinstance(store, LocalStore) and self.target is not None
        if self.in_place:
            os.makedirs(self.target, exist_ok=True)
            self.directory = self.target
        else:
            self.directory = tempfile.mkdtemp(prefix="hs-run-logs-")

    def sync(self) -> None:
        """Copy every file of the local directory into the store (nothing to do in place)."""
        if self.in_place or self.target is None:
            return
        for root, _, files in os.walk(self.directory):
            for name in files:
                local = os.path.join(root, name)
                relative = os.path.relpath(local, self.directory).replace(os.sep, "/")
                with open(local, "rb") as f:
                    self.store.write_bytes_atomic(posixpath.join(self.target, relative), f.read())

    def close(self) -> None:
        """Sync a last time and remove the scratch directory."""
        self.sync()
        if not self.in_place:
            shutil.rmtree(self.directory, ignore_errors=True)
