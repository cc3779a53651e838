"""The barrier Spark job of one run(), submitted from a background thread in its own job group.

The driver's main thread stays free to watch the service (failures arrive there first) and can
cancel the group; the group also lets the Spark UI and status tracker show which run() a job is.
"""
import threading
from typing import Callable, List, Optional

from pyspark.util import InheritableThread


class BarrierJob:
    def __init__(self, sc, num_proc: int, task_fn: Callable, group: str, description: str,
                 on_done: Callable[[], None]):
        self._sc = sc
        self._num_proc = num_proc
        self._task_fn = task_fn
        self.group = group
        self._description = description
        self._on_done = on_done
        self.results: Optional[List[tuple]] = None
        self.error: Optional[BaseException] = None
        self._finished = threading.Event()
        # InheritableThread carries the caller's local properties (scheduler pool, tags) over.
        self._thread = InheritableThread(target=self._run, name="hs-barrier-job:%s" % group, daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def _run(self) -> None:
        try:
            self._sc.setJobGroup(self.group, self._description, interruptOnCancel=True)
            rdd = self._sc.parallelize(range(self._num_proc), self._num_proc)
            self.results = rdd.barrier().mapPartitions(self._task_fn).collect()
        except BaseException as exc:
            self.error = exc
        finally:
            self._finished.set()
            self._on_done()

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def cancel(self) -> None:
        self._sc.cancelJobGroup(self.group)

    def join(self, timeout: float) -> bool:
        if self.started:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def stage_failures(self) -> int:
        """Failed task attempts so far in this group's stages (each one precedes a barrier retry)."""
        tracker = self._sc.statusTracker()
        failed = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in (job.stageIds if job else []):
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    failed += stage.numFailedTasks + (1 if stage.currentAttemptId > 0 else 0)
        return failed

    def launched_tasks(self) -> int:
        tracker = self._sc.statusTracker()
        active = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in (job.stageIds if job else []):
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    active += stage.numActiveTasks + stage.numCompletedTasks
        return active
