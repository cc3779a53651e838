"""Autotune (HOROVOD_AUTOTUNE, native/engine/autotune.h): real ranks train through the search and
after it, with correct sums throughout; rank 0's log has one row per trial and the final choice,
and every rank reports that same choice."""
import csv
import os
import subprocess
import sys

import pytest

import horovod_spark
from horovod_spark.common import config
from horovod_spark.exceptions import ConfigError, RankFailedError
from horovod_spark.launcher import run_local

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))  # the checkout


def _train_until_tuned(limit_s):
    """Steps of 24 small and 8 large gradients (fused and not) until no rank is searching any more."""
    import time

    import numpy as np

    from horovod_spark.common import basics, ops

    basics.init()
    r, n = basics.rank(), basics.size()
    grads = [np.zeros(1024 if i % 4 else 80000, np.float32) for i in range(32)]
    searching = np.zeros(1, np.float32)
    seen, steps, wrong = set(), 0, 0
    start = time.monotonic()
    while True:
        for i, g in enumerate(grads):
            g[:] = r + i + steps
        handles = [ops.allreduce_async("grad.%d" % i, g.ctypes.data, g.ctypes.data, "float32", g.shape, ops.Sum)
                   for i, g in enumerate(grads)]
        for h in handles:
            ops.wait(h)
        wrong += sum(not np.all(g == sum(q + i + steps for q in range(n))) for i, g in enumerate(grads))
        steps += 1
        params = basics.autotune_parameters()
        seen.add((params["fusion_threshold"], params["response_cache"]))
        # Ranks learn the final choice at slightly different steps: they stop together.
        searching[0] = params["searching"]
        ops.wait(ops.allreduce_async("searching", searching.ctypes.data, searching.ctypes.data, "float32",
                                     searching.shape, ops.Max))
        if not searching[0] or time.monotonic() - start > limit_s:
            break
    for _ in range(20):  # and go on under the choice
        for i, g in enumerate(grads):
            g[:] = i
        handles = [ops.allreduce_async("grad.%d" % i, g.ctypes.data, g.ctypes.data, "float32", g.shape, ops.Average)
                   for i, g in enumerate(grads)]
        for h in handles:
            ops.wait(h)
        wrong += sum(not np.allclose(g, i) for i, g in enumerate(grads))
    return dict(wrong=wrong, steps=steps, seen=sorted(seen), final=basics.autotune_parameters())


def test_autotune_finds_one_setting_for_every_rank_and_logs_its_trials(tmp_path):
    log = tmp_path / "autotune.csv"
    env = {"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": str(log), "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1",
           "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "4"}
    results = run_local(_train_until_tuned, args=(90,), num_proc=3, env=env, timeout=180)
    with open(log, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and list(rows[0]) == ["trial", "fusion_threshold_bytes", "response_cache", "score_bytes_per_second",
                                      "cycles", "seconds"], rows
    trials, final = rows[:-1], rows[-1]
    # The configured point first, the six other thresholds of the grid, then the cache turned off.
    assert [t["trial"] for t in trials] == [str(i) for i in range(8)], rows
    assert trials[0]["fusion_threshold_bytes"] == "134217728" and trials[0]["response_cache"] == "on", rows
    assert len({t["fusion_threshold_bytes"] for t in trials[:7]}) == 7, rows
    assert [t["response_cache"] for t in trials] == ["on"] * 7 + ["off"], rows
    for t in trials:
        assert float(t["score_bytes_per_second"]) > 0 and int(t["cycles"]) >= 3 * 4, t
        # Three scored samples of at least 0.1 s each; the log rounds to milliseconds (0.2996 s is
        # "0.300", and 3 * 0.1 is a hair above 0.3 in floating point).
        assert float(t["seconds"]) >= 0.3 - 0.0005, t
    best = max(trials, key=lambda t: float(t["score_bytes_per_second"]))
    assert final["trial"] == "final", rows
    assert {k: final[k] for k in ("fusion_threshold_bytes", "response_cache")} == \
        {k: best[k] for k in ("fusion_threshold_bytes", "response_cache")}, rows
    chosen = {"enabled": True, "searching": False, "trials": 8,
              "fusion_threshold": int(final["fusion_threshold_bytes"]),
              "response_cache": final["response_cache"] == "on"}
    for rank, out in enumerate(results):
        assert out["wrong"] == 0, (rank, out)
        assert out["final"] == chosen, (rank, out, rows)
        assert len(out["seen"]) >= 2, (rank, out)  # the trials' settings reached this rank as they ran
    assert len({out["steps"] for out in results}) == 1, results


def _report():
    from horovod_spark.common import basics

    basics.init()
    return basics.autotune_parameters()


def test_without_autotune_the_configured_setting_is_reported():
    out, = run_local(_report, num_proc=1, env={"HOROVOD_FUSION_THRESHOLD": "1048576", "HOROVOD_CACHE_CAPACITY": "0"},
                     timeout=60)
    assert out == {"enabled": False, "searching": False, "trials": 0, "fusion_threshold": 1048576,
                   "response_cache": False}


@pytest.mark.parametrize("env, words", [
    ({"HOROVOD_AUTOTUNE_LOG": "/nonexistent-dir/autotune.csv"},
     ["HOROVOD_AUTOTUNE_LOG='/nonexistent-dir/autotune.csv' cannot be written", "give a writable file path"]),
    ({"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "0"},
     ["HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE='0' is not a whole number from 1"]),
    ({"HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "three"}, ["HOROVOD_AUTOTUNE_WARMUP_SAMPLES='three' is not a whole number"]),
])
def test_bad_autotune_settings_fail_init_naming_the_variable(env, words, monkeypatch):
    # (in the ranks' inherited environment: run_local checks its env= itself, see below)
    for name, value in dict(env, HOROVOD_AUTOTUNE="1").items():
        monkeypatch.setenv(name, value)
    with pytest.raises(RankFailedError) as info:
        run_local(_report, num_proc=1, timeout=60)
    for w in words:
        assert w in str(info.value), str(info.value)


def test_autotune_variables_are_checked_before_ranks_start():
    with pytest.raises(ConfigError, match="env: HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE='0' is less than 1"):
        run_local(_report, num_proc=1, env={"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "0"}, timeout=60)
    with pytest.raises(ConfigError, match="HOROVOD_AUTOTUNE_WARMUP_SAMPLES='-1' is less than 0"):
        config.check_assignments({"HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "-1"}, "env")
    assert config.AUTOTUNE.get({"HOROVOD_AUTOTUNE": "1"}) is True
    assert config.AUTOTUNE_STEPS_PER_SAMPLE.get({}) == 10 and config.AUTOTUNE_WARMUP_SAMPLES.get({}) == 3


_INIT_AND_REPORT = """
from horovod_spark.common import basics
from horovod_spark.exceptions import ConfigError
try:
    basics.init()
except ConfigError as exc:
    print("ConfigError:", exc)
else:
    print("enabled:", basics.autotune_parameters()["enabled"])
"""


@pytest.mark.parametrize("value, answer", [
    ("off", "enabled: False"), ("OFF", "enabled: False"), ("no", "enabled: False"),
    ("ON", "enabled: True"), ("yes", "enabled: True"),
    ("maybe", "ConfigError: HOROVOD_AUTOTUNE='maybe' is neither on nor off; set it to 1, true, yes or on to turn it "
              "on; 0, false, no or off to turn it off, or unset it (default: off)"),
])
def test_the_core_reads_autotune_with_the_one_flag_grammar(value, answer):
    # The core itself (not run_local's check of env=): hvd.init() of one rank in a fresh process.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_")}
    env.update(HOROVOD_AUTOTUNE=value, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", _INIT_AND_REPORT], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == answer
