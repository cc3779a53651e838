"""Builds and runs the native tests (tests/native/*.cc) with the system C++ compiler.

The core is plain C++17 with no Python or framework headers, so it is tested on its own, without
building the extension: the collectives and reduction kernels over an in-process thread
transport, and the whole engine with ranks as threads over loopback TCP and shared memory
(test_engine). scripts/run_sanitizers.sh runs the same programs under ASan/UBSan and TSan.
Objects are compiled one at a time: build machines and CI runners are often small.
"""
import glob
import os
import shutil
import subprocess

import pytest
from support import REPO_ROOT as ROOT

NATIVE = os.path.join(ROOT, "native")
TESTS = os.path.join(ROOT, "tests", "native")
CXX = os.environ.get("CXX", "g++")
FLAGS = ["-std=c++17", "-O2", "-pthread", "-I" + NATIVE]


def _compile(source, obj, extra=()):
    cmd = [CXX, *FLAGS, *extra, "-c", source, "-o", obj]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail("compile failed: %s\n%s%s" % (" ".join(cmd), proc.stdout, proc.stderr))
    return obj


def _link(objs, exe, libs=()):
    cmd = [CXX, "-pthread", *objs, "-o", exe, *libs]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail("link failed: %s\n%s%s" % (" ".join(cmd), proc.stdout, proc.stderr))
    return exe


@pytest.fixture(scope="module")
def binaries(tmp_path_factory):
    if shutil.which(CXX) is None:
        pytest.skip("no C++ compiler (%s) on PATH" % CXX)
    out = str(tmp_path_factory.mktemp("native_collectives"))

    def objects(pattern, extra=(), tag=""):
        objs = []
        for src in sorted(glob.glob(pattern)):
            name = os.path.splitext(os.path.basename(src))[0]
            objs.append(_compile(src, os.path.join(out, name + tag + ".o"), extra))
        return objs

    common = objects(os.path.join(NATIVE, "common", "*.cc"))
    collectives = objects(os.path.join(NATIVE, "collectives", "*.cc"))
    # The kernels once more with the AVX2/F16C variant compiled out, so that the baseline
    # x86_64 code path is tested on machines that would otherwise always dispatch to AVX2.
    generic = objects(os.path.join(NATIVE, "common", "*.cc"), ["-DHS_REDUCE_FORCE_GENERIC"], "_generic")
    engine = (objects(os.path.join(NATIVE, "engine", "*.cc")) + objects(os.path.join(NATIVE, "transport", "*.cc"))
              + objects(os.path.join(NATIVE, "gpu", "*.cc")))
    engine_tests = objects(os.path.join(TESTS, "engine_*.cc"), ["-I" + TESTS])
    test_reduce = _compile(os.path.join(TESTS, "test_reduce.cc"), os.path.join(out, "test_reduce.o"))
    test_coll = _compile(os.path.join(TESTS, "test_collectives.cc"), os.path.join(out, "test_collectives.o"))
    test_frame_mac = _compile(os.path.join(TESTS, "test_frame_mac.cc"), os.path.join(out, "test_frame_mac.o"))
    test_adasum = _compile(os.path.join(TESTS, "test_adasum.cc"), os.path.join(out, "test_adasum.o"))
    test_engine = _compile(os.path.join(TESTS, "test_engine.cc"), os.path.join(out, "test_engine.o"), ["-I" + TESTS])
    return {
        "reduce": _link([test_reduce, *common], os.path.join(out, "test_reduce")),
        "reduce_generic": _link([test_reduce, *generic], os.path.join(out, "test_reduce_generic")),
        "collectives": _link([test_coll, *common, *collectives], os.path.join(out, "test_collectives")),
        "frame_mac": _link([test_frame_mac, *common], os.path.join(out, "test_frame_mac")),
        "adasum": _link([test_adasum, *common, *collectives], os.path.join(out, "test_adasum")),
        "engine": _link([test_engine, *engine_tests, *engine, *common, *collectives], os.path.join(out, "test_engine"),
                        ["-lrt", "-ldl"]),
    }


def _run(exe, timeout, args=()):
    proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, "%s failed (exit %d):\n%s" % (os.path.basename(exe), proc.returncode, output)
    return output


@pytest.mark.parametrize("variant", ["reduce", "reduce_generic"])
def test_reduction_kernels(binaries, variant):
    """half.h conversions, reduce_buffers and scale_buffer, bit for bit against references."""
    _run(binaries[variant], timeout=120)


def test_collectives(binaries):
    """Every collective x dtype x size x group size over the in-process thread transport."""
    _run(binaries["collectives"], timeout=300)


def test_frame_mac(binaries):
    """ChaCha20 and Poly1305 against RFC 8439's test vectors; prints the MAC's throughput."""
    output = _run(binaries["frame_mac"], timeout=120)
    assert " 0 failures" in output, output
    print(output)


def test_adasum(binaries):
    """Adasum for 1 to 9 ranks against its definition, tensor by tensor, the same bits on every rank."""
    _run(binaries["adasum"], timeout=300)


@pytest.mark.parametrize("scenario", ["collectives", "hierarchical", "cached_lane", "join", "process_sets", "threads",
                                      "failures", "links", "admission", "death"])
def test_engine(binaries, scenario, tmp_path):
    """The whole engine, ranks as threads (death: rank processes, one of which dies), exact results."""
    output = _run(binaries["engine"], timeout=300, args=[scenario, "--timeline", str(tmp_path / "timeline.json")])
    assert " 0 failures" in output, output
