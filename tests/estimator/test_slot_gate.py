"""The slot gate alone: fits of one driver that need more task slots than are free wait, say so,
and start as soon as the slots are given back; a fit bigger than the cluster or on a cluster of
unknown size is not held up."""
import threading
import time

import pytest

from horovod_spark.estimator.common import slot_gate

pytestmark = [pytest.mark.timeout(60), pytest.mark.legacy_stack]


def test_a_fit_waits_for_slots_held_by_another_says_so_and_starts_when_they_are_free():
    key = ("test", object())
    first_holds, first_may_end = threading.Event(), threading.Event()
    second_started = []
    logged = []

    def first():
        with slot_gate.slots_held(key, 2, 2, logged.append):
            first_holds.set()
            first_may_end.wait(30)

    def second():
        with slot_gate.slots_held(key, 2, 2, logged.append):
            second_started.append(time.monotonic())

    a = threading.Thread(target=first)
    a.start()
    assert first_holds.wait(30)
    b = threading.Thread(target=second)
    b.start()
    deadline = time.monotonic() + 30
    while not logged and time.monotonic() < deadline:
        time.sleep(0.01)
    assert logged == ["waiting for 2 free task slot(s): other fits of this driver hold 2 of the cluster's 2"]
    time.sleep(0.2)
    assert second_started == []
    released = time.monotonic()
    first_may_end.set()
    a.join(30)
    b.join(30)
    assert len(second_started) == 1 and second_started[0] >= released


def test_fits_that_fit_together_run_at_once():
    key = ("test", object())
    logged = []
    with slot_gate.slots_held(key, 4, 2, logged.append):
        with slot_gate.slots_held(key, 4, 2, logged.append):
            pass
    assert logged == []


def test_unknown_or_too_small_clusters_are_not_gated():
    key = ("test", object())
    logged = []
    with slot_gate.slots_held(key, None, 2, logged.append):
        with slot_gate.slots_held(key, None, 2, logged.append):
            pass
    with slot_gate.slots_held(key, 1, 2, logged.append):
        pass
    assert logged == []
