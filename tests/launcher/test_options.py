"""The options of local jobs: every bad value is refused by the one check of its option, in one
wording that names the call, before any process, port or thread exists."""
import threading

import pytest

from horovod_spark.exceptions import ConfigError
from horovod_spark.launcher import cli
from horovod_spark.launcher.elastic_job import run_elastic_local
from horovod_spark.launcher.local_job import LocalJob, run_local
from horovod_spark.launcher.options import (
    ElasticLocalOptions,
    LocalRunOptions,
    check_elastic_sizes,
    check_num_proc,
    check_rank_env,
    check_reset_limit,
)


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-3, ValueError), (2.0, TypeError), ("2", TypeError),
                                        (True, TypeError), (None, TypeError)])
def test_num_proc_has_one_check_and_one_wording(bad, error):
    with pytest.raises(error) as info:
        check_num_proc(bad, "run_local")
    assert str(info.value) == ("run_local(num_proc=%r): pass a positive number of ranks (num_proc must be a "
                               "positive integer)" % (bad,))


def test_num_proc_none_passes_only_where_it_means_something():
    assert check_num_proc(None, "SparkBackend", none_means="Spark's default parallelism") is None
    assert check_num_proc(3, "run_local") == 3
    with pytest.raises(ValueError, match=r"or None for Spark's default parallelism\)$"):
        check_num_proc(0, "SparkBackend", none_means="Spark's default parallelism")


def test_elastic_sizes_and_reset_limit():
    check_elastic_sizes(3, 1, 4, "run_elastic_local")
    with pytest.raises(ValueError, match=r"^run_elastic_local: need min_num_proc <= num_proc <= max_num_proc, got "
                                         r"4 <= 3 <= 3; change num_proc"):
        check_elastic_sizes(3, 4, 3, "run_elastic_local")
    assert check_reset_limit(None, "x") is None and check_reset_limit(0, "x") == 0
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"x\(reset_limit=.*\): reset_limit must be a whole number or None"):
            check_reset_limit(bad, "x")


def test_rank_env_values_become_strings_and_bad_entries_are_refused():
    assert check_rank_env({"A": 1, "B": "x"}, "run_local") == {"A": "1", "B": "x"}
    assert check_rank_env(None, "run_local") == {}
    with pytest.raises(TypeError, match=r"^run_local\(env=...\) takes a dict of environment variables for the "
                                        r"ranks, got list$"):
        check_rank_env(["A=1"], "run_local")
    with pytest.raises(TypeError, match=r"entries must be str -> str \(got 1: 'x'\)"):
        check_rank_env({1: "x"}, "run_local")
    with pytest.raises(TypeError, match=r"entries must be str -> str \(got 'A': None\)"):
        check_rank_env({"A": None}, "run_local")
    with pytest.raises(ConfigError, match="HOROVOD_CPU_BIND"):
        check_rank_env({"HOROVOD_CPU_BIND": "sometimes"}, "run_local")


def test_option_objects_are_frozen_and_resolve_their_defaults(monkeypatch):
    options = LocalRunOptions.from_kwargs("run_local", num_proc=3, env={"A": 2})
    assert (options.num_proc, options.env, options.timeout, options.prefix_output) == (3, {"A": "2"}, None, True)
    with pytest.raises(AttributeError):
        options.num_proc = 4
    monkeypatch.setenv("HOROVOD_ELASTIC_TIMEOUT", "7")
    elastic = ElasticLocalOptions.from_kwargs("run_elastic_local", num_proc=3, min_num_proc=2)
    assert (elastic.min_num_proc, elastic.max_num_proc, elastic.elastic_timeout) == (2, 3, 7.0)


@pytest.mark.parametrize("call, match", [
    (lambda: run_local(print, num_proc=0), r"^run_local\(num_proc=0\)"),
    (lambda: run_local(print, num_proc="2"), r"^run_local\(num_proc='2'\)"),
    (lambda: run_local(print, num_proc=2, env="A=1"), r"^run_local\(env=...\) takes a dict"),
    (lambda: LocalJob(["true"], 0), r"^LocalJob\(num_proc=0\)"),
    (lambda: run_elastic_local(print, num_proc=0), r"^run_elastic_local\(num_proc=0\)"),
    (lambda: run_elastic_local(print, num_proc=2, min_num_proc=0), r"^run_elastic_local\(min_num_proc=0\)"),
    (lambda: run_elastic_local(print, num_proc=2, max_num_proc=1), r"got 2 <= 2 <= 1"),
    (lambda: run_elastic_local(print, num_proc=2, reset_limit=-1), r"^run_elastic_local\(reset_limit=-1\)"),
])
def test_entry_points_refuse_bad_options_before_starting_anything(call, match):
    before = threading.active_count()
    with pytest.raises((TypeError, ValueError), match=match):
        call()
    assert threading.active_count() == before


def test_the_cli_checks_num_proc_with_the_same_wording(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["-np", "0", "python", "x.py"])
    assert info.value.code == 2
    assert "horovod-spark-run(num_proc=0): pass a positive number of ranks" in capsys.readouterr().err
