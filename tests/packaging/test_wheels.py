"""The release files of scripts/build_wheels.sh, installed where no C++ compiler is reachable.

For each supported CPython (3.10 to 3.13) a fresh venv, whose PATH holds no C or C++ compiler and
whose CC and CXX are ``false``, installs that Python's manylinux wheel. Then:

- every Python: the version is one string (``horovod_spark.__version__``, the wheel's metadata,
  ``horovod-spark-run --version``), ``--check-build`` runs, and ``horovod-spark-run -np 2`` runs an
  allreduce through the core (numpy-free: the wheel alone, with the locked cloudpickle);
- Python 3.11 (the locked stack's; torch 2.13's CPU wheel is locked for it alone): the wheel with its
  locked runtime dependencies (requirements.lock's pins of numpy, cloudpickle, pyspark, pyarrow,
  pandas, torch and theirs), then ``horovod_spark.run`` on local[2] and a tiny ``TorchEstimator`` fit.

And the sdist, built where the compiler is ``false``, stops at once naming what to install.
The wheels are built once per change of their sources (support/wheels.py caches them).
"""
import json
import os
import subprocess
import sys
import time
import zipfile

import pytest
from packaging.requirements import Requirement
from support import REPO_ROOT, wheels

pytestmark = [pytest.mark.timeout(wheels.BUILD_TIMEOUT_S + 900)]
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
CHECKS = os.path.join(os.path.dirname(os.path.abspath(wheels.__file__)), "installed_wheel_checks.py")
RUNTIME = ("numpy", "cloudpickle", "pyspark", "pyarrow", "pandas", "torch")


@pytest.fixture(scope="session")
def wheelhouse():
    return wheels.wheelhouse()


def _version():
    with open(os.path.join(REPO_ROOT, "horovod_spark", "__init__.py")) as f:
        return next(line.split('"')[1] for line in f if line.startswith("__version__ = "))


def _fresh_venv(python_version, scratch):
    interpreter = wheels.find_python(python_version)
    if interpreter is None:
        pytest.skip("no CPython %s on this machine (PATH or pyenv)" % python_version)
    venv = str(scratch / "venv")
    subprocess.run([interpreter, "-m", "venv", venv], check=True, timeout=300)
    return venv, wheels.no_compiler_env(venv, str(scratch))


def _record(wheelhouse, python_version, what, seconds):
    """Install times, for docs/install.md."""
    with open(os.path.join(wheelhouse, "install_seconds.jsonl"), "a") as f:
        f.write(json.dumps({"python": python_version, "what": what, "seconds": round(seconds, 1)}) + "\n")


@pytest.mark.parametrize("python_version", PYTHONS)
def test_the_wheel_installs_and_runs_ranks_without_a_compiler(wheelhouse, python_version, tmp_path):
    venv, env = _fresh_venv(python_version, tmp_path)
    assert subprocess.run(["bash", "-c", "command -v g++ c++ cc gcc clang"], env=env).returncode != 0, \
        "a compiler is reachable on the test's PATH"
    wheel = wheels.wheel_for(wheelhouse, python_version)
    python = wheels.python_of(venv)
    start = time.monotonic()
    if python_version == wheels.this_python():
        lock = tmp_path / "runtime.lock"
        lock.write_text(wheels.runtime_requirements(RUNTIME))
        wheels.run([python, "-m", "pip", "install", "--quiet", "--require-hashes", "-r", str(lock)],
                   env, str(tmp_path), 1800)
        _record(wheelhouse, python_version, "locked runtime dependencies (torch, pyspark, ...)",
                time.monotonic() - start)
    else:
        cloudpickle = tmp_path / "cloudpickle.lock"
        cloudpickle.write_text(wheels.runtime_requirements(["cloudpickle"]))
        wheels.run([python, "-m", "pip", "install", "--quiet", "--require-hashes", "-r", str(cloudpickle)],
                   env, str(tmp_path), 600)
    start = time.monotonic()
    wheels.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", wheel], env, str(tmp_path), 600)
    _record(wheelhouse, python_version, "the wheel (--no-deps)", time.monotonic() - start)

    where = json.loads(wheels.run([python, CHECKS, "where"], env, str(tmp_path), 120).stdout)
    assert where["folder"].startswith(venv), "imported %s, not the installed wheel" % where["folder"]
    assert where["version"] == where["metadata"] == _version()
    assert os.path.basename(wheel).startswith("horovod_spark-%s-" % _version())
    launcher = os.path.join(venv, "bin", "horovod-spark-run")
    assert wheels.run([launcher, "--version"], env, str(tmp_path), 120).stdout.strip() == \
        "horovod-spark-run " + _version()
    assert "Available Transports:" in wheels.run([launcher, "--check-build"], env, str(tmp_path), 300).stdout
    out = wheels.run([launcher, "-np", "2", python, CHECKS, "allreduce"], env, str(tmp_path), 300).stdout
    assert "rank 0 of 2: allreduce [3.0, 3.0, 3.0]" in out and "rank 1 of 2" in out
    if python_version == wheels.this_python():
        out = wheels.run([python, CHECKS, "spark"], env, str(tmp_path), 900).stdout
        assert "run and TorchEstimator fit on 2 ranks passed" in out


def test_the_wheels_carry_the_core_and_one_version(wheelhouse):
    for python_version in PYTHONS:
        if wheels.find_python(python_version) is None:
            continue
        with zipfile.ZipFile(wheels.wheel_for(wheelhouse, python_version)) as wheel:
            names = wheel.namelist()
            tag = "cpython-%s-x86_64-linux-gnu.so" % python_version.replace(".", "")
            assert "horovod_spark/common/_core.%s" % tag in names
            meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
            text = wheel.read(meta).decode()
            assert "\nVersion: %s\n" % _version() in text
            # The extras never pin what a Databricks runtime brings: lower bounds only.
            for line in text.splitlines():
                if line.startswith("Requires-Dist: "):
                    req = Requirement(line[len("Requires-Dist: "):])
                    if req.name in ("pyspark", "torch"):
                        assert {spec.operator for spec in req.specifier} == {">="}, line
            entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
            assert "horovod-spark-run = horovod_spark.launcher.cli:main" in wheel.read(entry_points).decode()


def test_the_sdist_without_a_compiler_stops_at_once_naming_what_to_install(wheelhouse, tmp_path):
    sdist = os.path.join(wheelhouse, "horovod_spark-%s.tar.gz" % _version())
    env = dict(os.environ, CC="false", CXX="false")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                           "-w", str(tmp_path), sdist], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "no working C++ compiler was found" in text and "apt-get install g++" in text, text[-3000:]
    assert "--only-binary horovod_spark" in text
    assert not list(tmp_path.glob("*.whl"))
    assert time.monotonic() - start < 120, "the build went on without a compiler"
