"""The lock files name exact versions that satisfy the ranges we declare: requirements*.in (what the
test environments are compiled from) and setup.py (what users' own environments may hold)."""
import ast
import os
import re

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support import REPO_ROOT as ROOT

pytestmark = pytest.mark.legacy_stack
STACKS = [("requirements.in", "requirements.lock"), ("requirements-legacy.in", "requirements-legacy.lock")]


def _lines(path):
    with open(os.path.join(ROOT, path)) as f:
        return [line.split("#", 1)[0].strip() for line in f]


def _ranges(path):
    return [Requirement(line) for line in _lines(path) if line]


def _locked(path):
    """{canonical name: version} of a pip-compile lock; each entry must be pinned with == and hashed."""
    text = open(os.path.join(ROOT, path)).read()
    pins = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        head = block.split("#", 1)[0].strip()
        if not head:
            continue
        req = Requirement(head.split(" \\", 1)[0].strip())
        spec = list(req.specifier)
        assert len(spec) == 1 and spec[0].operator == "==", "%s: %s is not pinned exactly" % (path, req)
        assert "--hash=sha256:" in block, "%s: %s has no hash" % (path, req)
        pins[canonicalize_name(req.name)] = spec[0].version
    return pins


# Extras the older stack's lock leaves out: MLflow is locked (and tracking of fits tested) on the
# main stack only.
EXTRAS_NOT_ON_LEGACY_STACK = ("mlflow",)


def _setup_ranges(leave_out=()):
    tree = ast.parse(open(os.path.join(ROOT, "setup.py")).read())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("INSTALL_REQUIRES", "EXTRAS_REQUIRE"):
                found[node.targets[0].id] = ast.literal_eval(node.value)
    reqs = [Requirement(r) for r in found["INSTALL_REQUIRES"]]
    for name, extra in found["EXTRAS_REQUIRE"].items():
        if name not in leave_out:
            reqs.extend(Requirement(r) for r in extra)
    return reqs


def _check(reqs, pins, where):
    for req in reqs:
        name = canonicalize_name(req.name)
        assert name in pins, "%s asks for %s, which the lock does not name" % (where, req)
        assert req.specifier.contains(pins[name], prereleases=True), (
            "%s asks for %s but the lock has %s==%s" % (where, req, req.name, pins[name]))


@pytest.mark.parametrize("ranges,lock", STACKS)
def test_lock_pins_everything_and_satisfies_its_ranges(ranges, lock):
    pins = _locked(lock)
    _check(_ranges(ranges), pins, ranges)
    # The CPU build of torch: a looser pin would pull several GB of CUDA wheels.
    assert pins["torch"].endswith("+cpu")


@pytest.mark.parametrize("lock", [lock for _, lock in STACKS])
def test_lock_satisfies_setup_py(lock):
    leave_out = EXTRAS_NOT_ON_LEGACY_STACK if lock == "requirements-legacy.lock" else ()
    _check(_setup_ranges(leave_out), _locked(lock), "setup.py")


def test_lock_is_what_this_environment_runs():
    """The venv running the tests holds the locked versions of what it imports (a stale venv would
    hide a lock that no longer installs)."""
    import sys
    from importlib import metadata

    lock = "requirements-legacy.lock" if "venv-legacy" in sys.prefix else "requirements.lock"
    pins = _locked(lock)
    for name in ("pyspark", "pyarrow", "numpy", "pandas", "cloudpickle", "torch"):
        assert metadata.version(name) == pins[canonicalize_name(name)], name
