"""Reads the scalars of TensorBoard event files back with TensorBoard's own reader."""
import glob
import os


def scalars(logs_dir: str) -> dict:
    """{tag: [(step, value), ...]} of every event file directly in ``logs_dir``, oldest first."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    assert glob.glob(os.path.join(logs_dir, "events.out.tfevents.*")), "no event file in %s: %s" % (
        logs_dir, os.listdir(logs_dir) if os.path.isdir(logs_dir) else "no such directory")
    accumulator = EventAccumulator(logs_dir, size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def assert_matches_history(logs_dir: str, history: dict, steps_are_epochs: bool = True) -> None:
    """One scalar per history name and epoch, equal to the history's value. With
    ``steps_are_epochs`` (the estimators' own event files) the tags are exactly the history's names
    and each step is the 0-based epoch; without it (Lightning's logger, which counts steps in
    optimizer steps and adds tags of its own) only the history's names and values are checked."""
    import pytest
    found = scalars(logs_dir)
    if steps_are_epochs:
        assert set(found) == set(history), (found, history)
    for name, values in history.items():
        assert name in found, (name, sorted(found))
        if steps_are_epochs:
            assert [step for step, _ in found[name]] == list(range(len(values))), (name, found[name])
        assert [v for _, v in found[name]] == pytest.approx(values, rel=1e-6), (name, found[name], values)
