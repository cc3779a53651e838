"""Building the release wheels once and installing one into a fresh venv that has no C++ compiler,
for tests/packaging.

- ``wheelhouse()``: scripts/build_wheels.sh's output for this checkout, cached under
  build/wheels/<hash of the files the build reads> (git-ignored), so a test session builds only when
  those files changed.
- ``no_compiler_env(venv)``: an environment whose PATH is the venv's bin plus a folder of links to
  every command on our PATH except the C and C++ compilers, with CC and CXX set to ``false``.
- ``runtime_requirements(names)``: the blocks of requirements.lock (exact versions, hashes) for
  ``names`` and everything they depend on, read from this environment's installed metadata (which
  is the lock: tests/project/test_locks.py checks it).
"""
import glob
import hashlib
import os
import re
import subprocess
import sys
import time
from importlib import metadata
from typing import Dict, Iterable, List, Optional

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from support import REPO_ROOT

# What scripts/build_wheels.sh reads: a change to any of these builds the wheels again. README.md, the
# wheels' long description, is left out: editing the docs changes nothing the tests check.
BUILD_INPUTS = ("setup.py", "pyproject.toml", "MANIFEST.in", "LICENSE", "requirements-build.lock",
                "requirements-wheel-tools.lock", "scripts/build_wheels.sh", "scripts/locked_venv.sh")
BUILD_TREES = ("horovod_spark", "native")
BUILD_TIMEOUT_S = 3600
COMPILER = re.compile(r"^(.*-)?(cc|c\+\+|g\+\+|gcc|cpp|clang|clang\+\+|clang-cpp)(-[0-9.]+)?$")


def sources_hash() -> str:
    digest = hashlib.sha256()
    paths = list(BUILD_INPUTS)
    for tree in BUILD_TREES:
        for folder, dirs, files in os.walk(os.path.join(REPO_ROOT, tree)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            paths += [os.path.relpath(os.path.join(folder, f), REPO_ROOT) for f in sorted(files)
                      if not f.endswith((".so", ".pyc", ".o"))]
    for path in sorted(paths):
        digest.update(path.encode() + b"\0")
        with open(os.path.join(REPO_ROOT, path), "rb") as f:
            digest.update(f.read() + b"\0")
    return digest.hexdigest()[:16]


def wheelhouse() -> str:
    """The folder holding this checkout's sdist and wheels (built now if they are not cached), with
    build.log (the build's output) and build_seconds (how long it took)."""
    out = os.path.join(REPO_ROOT, "build", "wheels", sources_hash())
    done = os.path.join(out, "build_seconds")
    if not os.path.exists(done):
        os.makedirs(out, exist_ok=True)
        start = time.monotonic()
        with open(os.path.join(out, "build.log"), "w") as log:
            status = subprocess.run(["bash", os.path.join(REPO_ROOT, "scripts", "build_wheels.sh"), out],
                                    stdout=log, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S).returncode
        if status != 0:
            raise RuntimeError("scripts/build_wheels.sh failed (%d):\n%s"
                               % (status, open(os.path.join(out, "build.log")).read()[-4000:]))
        with open(done, "w") as f:
            f.write("%.0f\n" % (time.monotonic() - start))
    return out


def wheel_for(house: str, python_version: str) -> str:
    tag = "cp" + python_version.replace(".", "")
    found = glob.glob(os.path.join(house, "horovod_spark-*-%s-%s-manylinux*.whl" % (tag, tag)))
    assert len(found) == 1, "expected one manylinux wheel for CPython %s in %s, found %s" % (
        python_version, house, found)
    return found[0]


def find_python(version: str) -> Optional[str]:
    """A working python<version>: on PATH, else under pyenv's versions (as build_wheels.sh finds it)."""
    import shutil
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [shutil.which("python" + version)] + sorted(
        glob.glob(os.path.join(root, "versions", version + ".*", "bin", "python" + version)))
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return candidate
    return None


def _no_compiler_bin(folder: str) -> str:
    """A folder of links to every command on PATH but the compilers (first one of each name wins)."""
    os.makedirs(folder, exist_ok=True)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory) or directory.startswith(REPO_ROOT):
            continue  # the checkout's own .venv/bin stays out: the fresh venv is the only Python
        for name in os.listdir(directory):
            target = os.path.join(directory, name)
            link = os.path.join(folder, name)
            if COMPILER.match(name) or os.path.lexists(link) or not os.access(target, os.X_OK):
                continue
            os.symlink(target, link)
    return folder


def no_compiler_env(venv: str, scratch: str) -> Dict[str, str]:
    """The environment of the fresh venv's commands: no compiler reachable, none of this checkout
    (no PYTHONPATH), the venv's Python for Spark's workers too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYSPARK_", "VIRTUAL_ENV", "PIP_"))}
    for name in ("PIP_DEFAULT_TIMEOUT", "PIP_CERT", "PIP_FIND_LINKS", "PIP_DISABLE_PIP_VERSION_CHECK"):
        if name in os.environ:
            env[name] = os.environ[name]
    bin_dir = os.path.join(venv, "bin")
    env.update(PATH=bin_dir + os.pathsep + _no_compiler_bin(os.path.join(scratch, "bin-without-compilers")),
               CC="false", CXX="false", VIRTUAL_ENV=venv, PYSPARK_PYTHON=os.path.join(bin_dir, "python"),
               PYSPARK_DRIVER_PYTHON=os.path.join(bin_dir, "python"))
    return env


def runtime_requirements(names: Iterable[str]) -> str:
    """requirements.lock's blocks (pins and hashes) of ``names`` and their dependencies."""
    wanted, todo = set(), [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    with open(os.path.join(REPO_ROOT, "requirements.lock")) as f:
        blocks = re.split(r"\n(?=[A-Za-z0-9])", f.read())
    chosen: List[str] = []
    for block in blocks:
        head = block.split("#", 1)[0].strip()
        if head and canonicalize_name(Requirement(head.split(" \\", 1)[0].strip()).name) in wanted:
            chosen.append(block.split("\n    #", 1)[0].rstrip())
    missing = wanted - {canonicalize_name(Requirement(b.split(" \\", 1)[0].strip()).name) for b in chosen}
    assert not missing, "requirements.lock does not pin %s" % sorted(missing)
    return "\n".join(chosen) + "\n"


def run(command: List[str], env: Dict[str, str], cwd: str, timeout: float) -> subprocess.CompletedProcess:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, "%s exited with %d\n--- stdout\n%s\n--- stderr\n%s" % (
        " ".join(command), done.returncode, done.stdout[-4000:], done.stderr[-4000:])
    return done


def python_of(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def this_python() -> str:
    return "%d.%d" % sys.version_info[:2]
