"""ProgressReporter's throttle: independent of where the monotonic clock starts."""
import io
import json

import pytest

from horovod_spark.estimator.common import progress_rank
from horovod_spark.estimator.common.progress_rank import MARKER, ProgressReporter

pytestmark = pytest.mark.legacy_stack


def _events(out):
    return [json.loads(line[len(MARKER):])["event"] for line in out.getvalue().splitlines()]


@pytest.mark.parametrize("clock_origin", [0.0, 0.1, 1e6])
def test_first_step_is_sent_whatever_the_clock_reads(monkeypatch, clock_origin):
    now = [clock_origin]
    monkeypatch.setattr(progress_rank.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    reporter = ProgressReporter(enabled=True, interval=0.5, out=out)
    reporter.step(0, 0, {"loss": 1.0})
    now[0] += 0.2
    reporter.step(0, 1, {"loss": 0.9})   # within the interval: dropped
    now[0] += 0.4
    reporter.step(0, 2, {"loss": 0.8})
    assert _events(out) == ["step", "step"]
