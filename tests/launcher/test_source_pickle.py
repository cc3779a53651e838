"""horovod_spark.common.source_pickle: code sent by value arrives with its driver-side file name and
source lines, in another process, whether or not a file of that name exists there."""
import importlib
import io
import marshal
import os
import pickle
import subprocess
import sys
import textwrap
import types

import cloudpickle
import pytest

import horovod_spark
from horovod_spark.common import source_pickle

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))

MODULE_V1 = textwrap.dedent('''\
    def check(value):
        if value > 1:
            raise ValueError("boom v1")  # the driver's line
        return value


    def train(values):
        total = lambda: sum(check(v) for v in values)
        return total()
    ''')

# The same module as a different version: another line where v1 raises, other text everywhere.
MODULE_V2 = "# version 2 on the executor\n\n\n" + MODULE_V1.replace("boom v1", "boom v2").replace(
    "the driver's line", "the executor's line")

# Runs in a fresh interpreter: load the payload, call it, print the traceback and fn's source.
LOADER = textwrap.dedent('''\
    import inspect, sys, traceback
    import cloudpickle
    with open(sys.argv[1], "rb") as f:
        fn, args = cloudpickle.load(f)
    try:
        fn(*args)
    except Exception:
        traceback.print_exc(file=sys.stdout)
    try:
        print("SOURCE " + inspect.getsource(fn))
    except OSError as exc:
        print("NO SOURCE: %s" % exc)
    ''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module of the user's, sent by value as a notebook's or a __main__'s functions are."""
    path = tmp_path / "user_mod_for_source_pickle.py"
    path.write_text(MODULE_V1)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(path.stem)
    cloudpickle.register_pickle_by_value(module)
    yield module, path
    cloudpickle.unregister_pickle_by_value(module)
    sys.modules.pop(path.stem, None)


def _load_elsewhere(payload: bytes, tmp_path) -> str:
    blob = tmp_path / "payload.pkl"
    blob.write_bytes(payload)
    # cwd and sys.path without the module's directory: the executor cannot import it.
    done = subprocess.run([sys.executable, "-c", LOADER, str(blob)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PYTHONPATH=REPO_ROOT))
    assert done.returncode == 0, done.stderr
    return done.stdout


def _frame(path, line: int, name: str) -> str:
    return 'File "%s", line %d, in %s' % (path, line, name)


@pytest.mark.parametrize("executor_file", ["absent", "another version"])
def test_traceback_shows_the_drivers_file_and_lines(user_module, tmp_path, executor_file):
    module, path = user_module
    payload = source_pickle.dumps((module.train, ([1, 2],)))
    if executor_file == "absent":
        path.unlink()
    else:
        path.write_text(MODULE_V2)
    out = _load_elsewhere(payload, tmp_path)
    assert _frame(path, 3, "check") in out and 'raise ValueError("boom v1")  # the driver\'s line' in out, out
    assert _frame(path, 8, "<lambda>") in out and _frame(path, 9, "train") in out, out
    assert "v2" not in out and "executor's line" not in out and "<dynamic-code>" not in out, out
    assert "SOURCE def train(values):\n    total = lambda" in out, out


def test_plain_cloudpickle_loses_what_source_pickle_keeps(user_module, tmp_path):
    """The reason for source_pickle: without it, cloudpickle >= 3.1 renames by-value code."""
    module, path = user_module
    path.unlink()
    out = _load_elsewhere(cloudpickle.dumps((module.check, (5,))), tmp_path)
    assert "boom v1" in out and "# the driver's line" not in out and "NO SOURCE" in out, out


class _NameKeepingPickler(source_pickle._SourcePickler):
    """Reduces code objects the way cloudpickle < 3.1 did as far as the name goes: co_filename kept."""

    def _cloudpickle_reduction(self, code):
        return marshal.loads, (marshal.dumps(code),)


def test_lines_travel_also_when_the_name_is_kept(user_module, tmp_path):
    module, path = user_module
    buffer = io.BytesIO()
    _NameKeepingPickler(buffer).dump((module.train, ([3],)))
    path.write_text(MODULE_V2)
    out = _load_elsewhere(buffer.getvalue(), tmp_path)
    assert _frame(path, 3, "check") in out and "# the driver's line" in out and "v2" not in out, out


def test_each_file_travels_once_and_only_with_by_value_code(user_module):
    module, _ = user_module
    payload = source_pickle.dumps([module.check, module.train, module.check])
    assert payload.count(b"the driver's line") == 1
    # Functions pickled by reference carry no code, so nothing is added.
    assert source_pickle.dumps((os.path.join, textwrap.dedent)) == cloudpickle.dumps((os.path.join, textwrap.dedent))


def test_code_without_source_keeps_its_name(tmp_path):
    namespace = {"__name__": "__main__"}
    exec(compile("def made():\n    raise KeyError('no file')\n", "<generated>", "exec"), namespace)
    fn = types.FunctionType(namespace["made"].__code__, {"__builtins__": __builtins__}, "made")
    payload = source_pickle.dumps(fn)
    assert b"_restore_code" in payload  # it travelled by value
    loaded = pickle.loads(payload)
    assert loaded.__code__.co_filename == "<generated>"
    with pytest.raises(KeyError, match="no file"):
        loaded()
