"""Builds horovod_spark and its native collective core.

The core is plain C++17 with no PyTorch or TensorFlow headers, so one build serves every framework
and any torch version; only pybind11 is needed at build time.
"""
import glob
import os
import re
import shutil
import subprocess

from setuptools import find_packages, setup
from setuptools.command.build_ext import build_ext

try:
    from pybind11.setup_helpers import Pybind11Extension, has_flag
except ImportError as exc:  # pragma: no cover - explained to the user, not silently skipped
    raise SystemExit("horovod_spark needs pybind11 to build its native core: pip install pybind11") from exc

HERE = os.path.dirname(os.path.abspath(__file__))


def package_version():
    """horovod_spark.__version__, read from the source (importing the package here would need its
    dependencies at build time)."""
    with open(os.path.join(HERE, "horovod_spark", "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M).group(1)


# The ranges the library works with, for installing it into an environment of your own. The tests
# run on the exact versions of requirements.lock / requirements-legacy.lock, and tests/project/test_locks.py
# checks that both locks satisfy these ranges.
INSTALL_REQUIRES = ["numpy>=1.26", "cloudpickle>=3.0"]
EXTRAS_REQUIRE = {
    "spark": ["pyspark>=3.5", "pyarrow>=14", "pandas>=2.2,<3"],
    "torch": ["torch>=2.13"],
    # TensorFlow itself is left to the user: tensorflow, tensorflow-cpu and vendor builds are all
    # different distributions of the same package.
    "keras": ["keras>=3.10"],
    "store": ["fsspec>=2024.2"],
    # horovod_spark.lightning: the unified `lightning` package (lightning.pytorch), not pytorch-lightning.
    "lightning": ["lightning>=2.4,<2.7", "torch>=2.13"],
    # TensorBoard event files of fits in the store's runs/<run_id>/logs (fits run without it).
    "tensorboard": ["tensorboard>=2.14"],
    # Tracking of estimator fits (docs/mlflow.md); a Databricks ML runtime already has MLflow.
    "mlflow": ["mlflow>=3.0"],
}
sources = sorted(glob.glob("native/**/*.cc", recursive=True))


def gpu_header_dirs():
    """Where nccl.h and cuda_runtime_api.h are, when both are: the build then checks the NCCL data
    plane's own declarations of their interfaces (native/gpu/gpu_abi.h) against them. Neither is
    needed: libnccl and libcudart are opened at run time. nccl.h comes from the nvidia-nccl-cu12
    package (which a CUDA build of torch installs), cuda_runtime_api.h from $CUDA_HOME/include
    (default /usr/local/cuda)."""
    try:
        import nvidia.nccl
    except ImportError:
        return []
    nccl = os.path.join(list(nvidia.nccl.__path__)[0], "include")
    cuda = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include")
    found = [d for d, header in ((nccl, "nccl.h"), (cuda, "cuda_runtime_api.h"))
             if os.path.isfile(os.path.join(d, header))]
    return found if len(found) == 2 else []


GPU_HEADERS = gpu_header_dirs()
# Where the compiler takes it (gcc, recent clang; x86-64 only): thread_local reads through TLS
# descriptors, a few instructions each, instead of a __tls_get_addr call each, which this
# dlopen'ed module otherwise pays several times per exchange (about 1,000 instructions of a 4 KiB
# allreduce).
TLS_DESCRIPTORS = "-mtls-dialect=gnu2"
core = Pybind11Extension(
    "horovod_spark.common._core",
    sources,
    include_dirs=["native"] + GPU_HEADERS,
    define_macros=[("HS_CHECK_GPU_ABI", "1")] if GPU_HEADERS else [],
    cxx_std=17,
    extra_compile_args=["-O3", "-fvisibility=hidden", "-Wall", "-Wno-unused-function"],
    extra_link_args=["-pthread", "-lrt", "-ldl"],
)


NO_COMPILER = """horovod_spark builds its native core from C++17 sources when it is installed from source, and
no working C++ compiler was found ({tried}).
Either install one and retry:
    Debian/Ubuntu: apt-get install g++        RHEL/Fedora/Rocky: dnf install gcc-c++
    Alpine: apk add g++                         conda: conda install -c conda-forge gxx_linux-64
(or point CC and CXX at yours), or install a binary wheel, which needs no compiler:
    pip install --only-binary horovod_spark horovod_spark"""


def missing_compilers(compiler):
    """The compiler commands of this build (CC, CXX and the linker, as setuptools resolved them)
    that are not there or do not run; empty when all of them work."""
    missing = []
    for attr in ("compiler_so", "compiler_cxx", "linker_so"):
        command = getattr(compiler, attr, None)
        if not command or command[0] in missing:
            continue
        exe = shutil.which(command[0])
        try:
            works = exe is not None and subprocess.run([exe, "--version"], stdout=subprocess.DEVNULL,
                                                       stderr=subprocess.DEVNULL, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            works = False
        if not works:
            missing.append(command[0])
    return missing


class ParallelBuildExt(build_ext):
    """Compile the core's translation units in parallel (setuptools compiles serially by default),
    after checking that there is a compiler: without one the build stops at once with what to
    install, instead of failing later on the first source file."""

    def build_extensions(self):
        missing = missing_compilers(self.compiler)
        if missing:
            raise SystemExit(NO_COMPILER.format(tried=", ".join(repr(c) for c in missing)
                                                + " did not run; CC=%r, CXX=%r" % (os.environ.get("CC"),
                                                                                   os.environ.get("CXX"))))
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1
        if has_flag(self.compiler, TLS_DESCRIPTORS):
            for ext in self.extensions:
                ext.extra_compile_args.append(TLS_DESCRIPTORS)
        super().build_extensions()


setup(
    name="horovod_spark",
    version=package_version(),
    description="Horovod-style distributed deep learning on Apache Spark",
    long_description=open(os.path.join(HERE, "README.md")).read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    packages=find_packages(include=["horovod_spark", "horovod_spark.*"]),
    ext_modules=[core],
    cmdclass={"build_ext": ParallelBuildExt},
    python_requires=">=3.9",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={"console_scripts": ["horovod-spark-run = horovod_spark.launcher.cli:main"]},
)
