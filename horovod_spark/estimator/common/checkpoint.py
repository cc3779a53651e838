"""Checkpoints of a run in the store: ``runs/<run_id>/checkpoints/epoch-NNNNN.ckpt`` (N = epochs
completed) plus ``runs/<run_id>/run.json`` describing what the run trains.

Contents are opaque bytes to this module (each framework writes its own). Writes are atomic
(temporary file + rename), so a rank killed mid-write leaves the previous checkpoint intact and
a resumed fit never reads half a file. Only the newest ``keep`` checkpoints are kept.
"""
import json
import posixpath
import re
from typing import Optional, Tuple

_NAME = re.compile(r"^epoch-(\d{5,})\.ckpt$")


class CheckpointStore:
    def __init__(self, store, run_id: str, keep: int = 2):
        self.store = store
        self.run_id = run_id
        self.keep = max(1, keep)
        self.directory = store.get_checkpoint_path(run_id)
        if self.directory is None:
            raise ValueError("store %r keeps no runs (save_runs=False), but a fit checkpoints every epoch in the "
                             "store, to resume from and to build its model: create the store with save_runs=True "
                             "(the default)" % (store,))
        self.run_record_path = posixpath.join(store.get_run_path(run_id), "run.json")

    def path_for(self, epochs_done: int) -> str:
        return posixpath.join(self.directory, "epoch-%05d.ckpt" % epochs_done)

    def completed(self):
        """(epochs completed, path) of every checkpoint, oldest first."""
        if not self.store.is_dir(self.directory):
            return []
        found = []
        for path in self.store.list(self.directory):
            m = _NAME.match(posixpath.basename(path))
            if m:
                found.append((int(m.group(1)), path))
        return sorted(found)

    def latest(self) -> Optional[Tuple[int, str]]:
        done = self.completed()
        return done[-1] if done else None

    def write(self, epochs_done: int, data: bytes) -> str:
        path = self.path_for(epochs_done)
        self.store.write_bytes_atomic(path, data)
        for _, old in self.completed()[:-self.keep]:
            self.store.delete(old)
        return path

    def read(self, path: str) -> bytes:
        return self.store.read_bytes(path)

    def read_run_record(self) -> Optional[dict]:
        if not self.store.exists(self.run_record_path):
            return None
        return json.loads(self.store.read_bytes(self.run_record_path).decode("utf-8"))

    def write_run_record(self, record: dict) -> None:
        self.store.write_bytes_atomic(self.run_record_path, json.dumps(record, indent=1, sort_keys=True).encode())


def resumes(spec) -> bool:
    """Whether a rank starts from the checkpoint ``spec.resume_path``. In an elastic fit, a rank that
    joins later finds that checkpoint pruned by newer ones: it takes rank 0's state (state.sync) instead."""
    if spec.resume_path is None:
        return False
    return not spec.elastic or spec.store.exists(spec.resume_path)
