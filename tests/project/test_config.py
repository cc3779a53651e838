"""horovod_spark.common.config: parsing, the errors for bad values, agreement with the native core,
and docs/configuration.md kept in step with every HOROVOD_* name the code reads or writes."""
import glob
import os
import re
import subprocess
import sys

import pytest

import horovod_spark
from horovod_spark.common import _core, config
from horovod_spark.exceptions import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))  # the checkout
NAME = re.compile(r"(?<![A-Za-z0-9_])HOROVOD_[A-Z0-9_]+")


# -- reading and parsing -----------------------------------------------------------------------

def test_read_when_asked_not_at_import(monkeypatch):
    monkeypatch.delenv("HOROVOD_START_TIMEOUT", raising=False)
    assert config.START_TIMEOUT.get() == 120.0
    monkeypatch.setenv("HOROVOD_START_TIMEOUT", "7.5")
    assert config.START_TIMEOUT.get() == 7.5
    monkeypatch.setenv("HOROVOD_START_TIMEOUT", "")  # empty counts as unset, as in the core
    assert config.START_TIMEOUT.get() == 120.0
    assert not config.START_TIMEOUT.is_set()


def test_an_explicit_environment_and_default():
    env = {"HOROVOD_LOCAL_RANK": "3", "HOROVOD_SPARK_GPUS": " 0, ,2 "}
    assert config.LOCAL_RANK.get(env) == 3
    assert config.LOCAL_SIZE.get(env) is None
    assert config.LOCAL_SIZE.get(env, default=4) == 4
    assert config.SPARK_GPUS.get(env) == ("0", "2")
    assert config.SPARK_GPUS.get({}) == ()


@pytest.mark.parametrize("variable, text, message", [
    (config.START_TIMEOUT, "abc",
     "HOROVOD_START_TIMEOUT='abc' is not a number of seconds; set it to a number of seconds of at least 1, "
     "such as 120, or unset it (default: 120)"),
    (config.START_TIMEOUT, "0.5", "HOROVOD_START_TIMEOUT='0.5' is less than 1; set it to a number of seconds"),
    (config.START_TIMEOUT, "inf", "HOROVOD_START_TIMEOUT='inf' is not a finite number"),
    (config.SPARK_START_TIMEOUT, "0", "HOROVOD_SPARK_START_TIMEOUT='0' is not above 0; set it to a number of "
     "seconds above 0, such as 600, or unset it (default: 600)"),
    (config.SPARK_SLOT_WAIT, "-1", "HOROVOD_SPARK_SLOT_WAIT='-1' is less than 0"),
    (config.RANK, "1.5", "HOROVOD_RANK='1.5' is not a whole number; set it to a whole number of at least 0"),
    (config.SIZE, "0", "HOROVOD_SIZE='0' is less than 1; set it to a whole number of at least 1"),
    (config.RENDEZVOUS_PORT, "70000", "HOROVOD_RENDEZVOUS_PORT='70000' is not a port number between 1 and 65535"),
    (config.SECRET_KEY, "xyz", "HOROVOD_SECRET_KEY='xyz' is not hexadecimal digits"),
    (config.SPARK_USE_MPI, "maybe", "HOROVOD_SPARK_USE_MPI='maybe' is neither on nor off; set it to 1, true, yes "
     "or on to turn it on; 0, false, no or off to turn it off, or unset it (default: off)"),
    (config.AUTOTUNE, "maybe", "HOROVOD_AUTOTUNE='maybe' is neither on nor off; set it to 1, true, yes or on to "
     "turn it on; 0, false, no or off to turn it off, or unset it (default: off)"),
    (config.HIERARCHICAL_ALLREDUCE, "sometimes", "HOROVOD_HIERARCHICAL_ALLREDUCE='sometimes' is neither auto, on "
     "nor off; set it to auto (or unset) to let the core choose; 1, true"),
    (config.CPU_OPERATIONS, "nccl", "HOROVOD_CPU_OPERATIONS='nccl' is not one of mpi, gloo; set it to one of "
     "mpi, gloo (tcp means gloo, shm means gloo)"),
    (config.SPARK_HOST_KEY, "node", "HOROVOD_SPARK_HOST_KEY='node' is not one of hostname, executor"),
])
def test_bad_values_name_the_variable_the_value_and_what_it_accepts(monkeypatch, variable, text, message):
    monkeypatch.setenv(variable.name, text)
    with pytest.raises(ConfigError) as info:
        variable.get()
    assert str(info.value).startswith(message)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("variable, text, value", [
    (config.SPARK_USE_MPI, "TRUE", True), (config.SPARK_USE_MPI, "off", False),
    (config.CPU_OPERATIONS, "TCP", "gloo"), (config.CPU_OPERATIONS, "MPI", "mpi"),
    (config.SPARK_HOST_KEY, "Executor", "executor"), (config.RENDEZVOUS_PORT, "8080", 8080),
    (config.SECRET_KEY, "00ff", b"\x00\xff"), (config.GLOO_IFACE, "eth0,eth1", ("eth0", "eth1")),
    (config.SPARK_SLOT_WAIT, "0", 0.0), (config.SHM_DISABLE, "no", False), (config.SHM_DISABLE, "yes", True),
    (config.AUTOTUNE, "off", False), (config.AUTOTUNE, "ON", True),
])
def test_good_values(variable, text, value):
    assert variable.parse(text) == value


def test_require_says_who_sets_a_missing_variable():
    with pytest.raises(ConfigError, match="HOROVOD_SPARK_WORKDIR is not set; the launcher that starts"):
        config.SPARK_WORKDIR.require({})
    assert config.SPARK_WORKDIR.require({"HOROVOD_SPARK_WORKDIR": "/tmp/x"}) == "/tmp/x"


def test_rank_environment_errors():
    from horovod_spark.common import rendezvous
    from horovod_spark.common.kv_client import KVClient
    assert rendezvous.identity_from(environ={}).source == "single"
    with pytest.raises(ConfigError, match="HOROVOD_RANK=3 is not below HOROVOD_SIZE=2"):
        rendezvous.identity_from(environ={"HOROVOD_RANK": "3", "HOROVOD_SIZE": "2"})
    with pytest.raises(ConfigError, match="HOROVOD_SIZE is not set; it goes with HOROVOD_RANK"):
        rendezvous.identity_from(environ={"HOROVOD_RANK": "0"})
    with pytest.raises(ConfigError, match="HOROVOD_RANK='x' is not a whole number"):
        rendezvous.identity_from(environ={"HOROVOD_RANK": "x", "HOROVOD_SIZE": "2"})
    with pytest.raises(ConfigError, match="incomplete: HOROVOD_RENDEZVOUS_PORT, HOROVOD_SECRET_KEY not set"):
        KVClient.from_env({"HOROVOD_RENDEZVOUS_ADDR": "127.0.0.1"})


def test_init_refuses_a_bad_start_timeout_before_starting_anything():
    env = dict(os.environ, PYTHONPATH=ROOT, HOROVOD_START_TIMEOUT="abc")
    script = "import horovod_spark.torch as hvd\ntry:\n    hvd.init()\nexcept ValueError as e:\n    print(e)"
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("HOROVOD_START_TIMEOUT='abc' is not a number of seconds")


@pytest.mark.parametrize("argv, message", [
    (["--env", "HOROVOD_CPU_OPERATIONS=nccl"], "--env: HOROVOD_CPU_OPERATIONS='nccl' is not one of mpi, gloo"),
    (["--start-timeout", "0.5"], "argument --start-timeout: '0.5' is less than 1"),
])
def test_command_line_refuses_bad_values_before_starting_ranks(argv, message):
    proc = subprocess.run([sys.executable, "-m", "horovod_spark.launcher", "-np", "2"] + argv + ["true"],
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_run_local_and_spark_run_refuse_bad_values_in_env_before_starting_ranks():
    from horovod_spark.launcher import run_local
    from horovod_spark.launcher.options import check_rank_env as _rank_env
    with pytest.raises(ConfigError, match="env: HOROVOD_SHM_RING_BYTES='10' is less than 65536"):
        run_local(print, env={"HOROVOD_SHM_RING_BYTES": "10"})
    with pytest.raises(ConfigError, match="env: HOROVOD_START_TIMEOUT='soon' is not a number of seconds"):
        _rank_env({"HOROVOD_START_TIMEOUT": "soon", "OTHER": "x"})
    assert _rank_env({"HOROVOD_START_TIMEOUT": 30, "OTHER": "x"}) == {"HOROVOD_START_TIMEOUT": "30", "OTHER": "x"}


# -- agreement with the native core --------------------------------------------------------------

# config.py's entry -> the key of _core.config() holding the core's reading of it.
CORE_KEYS = {
    "HOROVOD_FUSION_THRESHOLD": "fusion_threshold", "HOROVOD_CYCLE_TIME": "cycle_time_ms",
    "HOROVOD_CACHE_CAPACITY": "cache_capacity", "HOROVOD_STALL_CHECK_TIME_SECONDS": "stall_check_seconds",
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "stall_shutdown_seconds",
    "HOROVOD_STALL_CHECK_DISABLE": "stall_check_disable",
    "HOROVOD_PROCESS_SET_TIMEOUT": "process_set_timeout_seconds", "HOROVOD_TIMELINE": "timeline_path",
    "HOROVOD_TIMELINE_MARK_CYCLES": "timeline_mark_cycles", "HOROVOD_DATA_TIMEOUT_SECONDS": "data_timeout_seconds",
    "HOROVOD_START_TIMEOUT": "start_timeout_seconds", "HOROVOD_SHM_DISABLE": "shm_disable",
    "HOROVOD_SPARK_DATA_PLANE_AUTH": "data_plane_auth",
    "HOROVOD_YIELD_WHEN_IDLE": "yield_when_idle",
    "HOROVOD_SHM_RING_BYTES": "shm_ring_bytes", "HOROVOD_SHM_SINGLE_COPY_BYTES": "shm_single_copy_bytes",
    "HOROVOD_SPECULATIVE_ALLREDUCE": "speculative_allreduce",
    "HOROVOD_HIERARCHICAL_ALLREDUCE": "hierarchical_allreduce",
    "HOROVOD_HIERARCHICAL_ALLGATHER": "hierarchical_allgather",
    "HOROVOD_AUTOTUNE": "autotune", "HOROVOD_AUTOTUNE_LOG": "autotune_log",
    "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "autotune_warmup_samples",
    "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "autotune_steps_per_sample",
}


def _core_variables():
    return [v for v in config.VARIABLES.values() if v.read_by in (config.CORE, config.PYTHON_AND_CORE)]


def test_every_core_variable_has_its_core_reading():
    assert sorted(v.name for v in _core_variables()) == sorted(CORE_KEYS)


def test_core_defaults_are_the_documented_ones(monkeypatch):
    for name in CORE_KEYS:
        monkeypatch.delenv(name, raising=False)
    core = _core.config()
    for variable in _core_variables():
        expected = "" if variable.default is None else variable.default
        assert core[CORE_KEYS[variable.name]] == expected, variable.name


@pytest.mark.parametrize("text", ["abc", "-1", "0", "0.5", "1", "5", "1e3", "70000", "2.5x"])
def test_python_and_the_core_accept_the_same_numbers(monkeypatch, text):
    for variable in _core_variables():
        if variable.kind in (config.FLAG, config.SWITCH) or variable.name == "HOROVOD_TIMELINE":
            continue
        monkeypatch.setenv(variable.name, text)
        try:
            _core.config()
            core_ok = True
        except ValueError:
            core_ok = False
        try:
            variable.get()
            python_ok = True
        except ConfigError:
            python_ok = False
        assert python_ok == core_ok, (variable.name, text)
        monkeypatch.delenv(variable.name)


FLAG_WORDS = ["1", "0", "true", "false", "False", "FALSE", "yes", "no", "NO", "on", "ON", "off", "Off", " yes "]


@pytest.mark.parametrize("text", FLAG_WORDS + ["auto", "Auto", "AUTO"])
def test_python_and_the_core_read_flags_alike(monkeypatch, text):
    for variable in _core_variables():
        if variable.kind is config.SWITCH or (variable.kind is config.FLAG and text.lower() != "auto"):
            monkeypatch.setenv(variable.name, text)
            assert _core.config()[CORE_KEYS[variable.name]] == variable.get(), (variable.name, text)
            monkeypatch.delenv(variable.name)


@pytest.mark.parametrize("text", ["maybe", "2", "enabled", "auto", "o n", "-1"])
def test_python_and_the_core_refuse_the_same_flag_words_alike(monkeypatch, text):
    for variable in _core_variables():
        if variable.kind not in (config.FLAG, config.SWITCH) or (variable.kind is config.SWITCH and text == "auto"):
            continue
        monkeypatch.setenv(variable.name, text)
        with pytest.raises(ConfigError) as python_error:
            variable.get()
        with pytest.raises(ConfigError) as core_error:
            _core.config()
        assert str(core_error.value) == str(python_error.value)
        assert str(core_error.value).startswith("%s=%r is neither " % (variable.name, text))
        monkeypatch.delenv(variable.name)


@pytest.mark.parametrize("text, value", [("on", True), ("ON", True), ("Yes", True), ("TRUE", True), ("1", True),
                                         ("off", False), ("OFF", False), ("No", False), ("false", False),
                                         ("0", False), (" off ", False)])
def test_every_flag_has_one_grammar(text, value):
    flags = [v for v in config.VARIABLES.values() if v.kind is config.FLAG]
    assert {v.name for v in flags} >= {"HOROVOD_AUTOTUNE", "HOROVOD_SHM_DISABLE", "HOROVOD_SPARK_TLS",
                                       "HOROVOD_SPARK_SKIP_LEGACY"}
    for variable in flags:
        assert variable.parse(text) is value, variable.name
    switch = config.HIERARCHICAL_ALLREDUCE
    assert switch.parse(text) == ("on" if value else "off")
    assert switch.parse("AUTO") == "auto"


def test_every_flag_kind_is_the_one_flag_grammar():
    # A variable that is on or off is a FLAG (or a SWITCH, which adds auto): no flag reads its own words.
    for variable in config.VARIABLES.values():
        if isinstance(variable.default, bool):
            assert variable.kind is config.FLAG, variable.name


# -- docs/configuration.md and the code ----------------------------------------------------------

def _source_files():
    patterns = ["horovod_spark/**/*.py", "native/**/*.cc", "native/**/*.h", "scripts/*", "setup.py"]
    for pattern in patterns:
        for path in glob.glob(os.path.join(ROOT, pattern), recursive=True):
            if os.path.isfile(path) and "third_party" not in path:
                yield os.path.relpath(path, ROOT)


def _names_in(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return set(NAME.findall(f.read()))


def test_every_name_the_code_spells_is_in_the_registry():
    unknown = {}
    for path in _source_files():
        for name in _names_in(path) - set(config.VARIABLES):
            unknown.setdefault(name, []).append(path)
    assert not unknown, "HOROVOD_* names missing from horovod_spark/common/config.py: %s" % unknown


def test_every_registered_variable_is_read_where_the_table_says():
    python_code = ""
    for path in _source_files():
        if path.endswith(".py") and path != os.path.join("horovod_spark", "common", "config.py"):
            with open(os.path.join(ROOT, path), encoding="utf-8") as f:
                python_code += f.read()
    attributes = {v.name: attr for attr, v in vars(config).items() if isinstance(v, config.Variable)}
    core_config = _names_in(os.path.join("native", "common", "config.cc"))
    scripts = set().union(*(_names_in(p) for p in _source_files() if p.startswith("scripts")))
    for variable in config.VARIABLES.values():
        if variable.read_by in (config.PYTHON, config.PYTHON_AND_CORE):
            assert re.search(r"config\.%s\.(get|require|is_set|raw)\(" % attributes[variable.name], python_code), \
                "%s is documented as read by Python, but nothing reads it" % variable.name
        if variable.read_by in (config.CORE, config.PYTHON_AND_CORE):
            assert variable.name in core_config, "%s is not read by native/common/config.cc" % variable.name
        if variable.read_by == config.SCRIPTS:
            assert variable.name in scripts, variable.name


def test_python_outside_config_never_spells_a_variable_name_as_a_string():
    literal = re.compile(r"""["']HOROVOD_[A-Z0-9_]+["']""")
    offenders = []
    for path in _source_files():
        if path.endswith(".py") and path != os.path.join("horovod_spark", "common", "config.py"):
            with open(os.path.join(ROOT, path), encoding="utf-8") as f:
                if literal.search(f.read()):
                    offenders.append(path)
    assert not offenders, "read or write these through horovod_spark.common.config: %s" % offenders


def test_the_docs_table_is_the_generated_one():
    with open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    documented = [line for line in lines if line.startswith("|")]
    assert documented == config.table_rows(), "regenerate it: python -m horovod_spark.common.config"
    for doc in ("README.md", os.path.join("docs", "dev", "contracts.md")):
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            assert "configuration.md" in f.read(), doc
