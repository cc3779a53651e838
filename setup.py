"""Builds horovod_spark and its native collective core.

The core is plain C++17 with no PyTorch or TensorFlow headers, so one build serves every framework
and any torch version; only pybind11 is needed at build time.
"""
import glob
import os

from setuptools import find_packages, setup
from setuptools.command.build_ext import build_ext

try:
    from pybind11.setup_helpers import Pybind11Extension
except ImportError as exc:  # pragma: no cover - explained to the user, not silently skipped
    raise SystemExit("horovod_spark needs pybind11 to build its native core: pip install pybind11") from exc

HERE = os.path.dirname(os.path.abspath(__file__))
sources = sorted(glob.glob("native/**/*.cc", recursive=True))

core = Pybind11Extension(
    "horovod_spark.common._core",
    sources,
    include_dirs=["native"],
    cxx_std=17,
    extra_compile_args=["-O3", "-fvisibility=hidden", "-Wall", "-Wno-unused-function"],
    extra_link_args=["-pthread", "-lrt", "-ldl"],
)


class ParallelBuildExt(build_ext):
    """Compile the core's translation units in parallel (setuptools compiles serially by default)."""

    def build_extensions(self):
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1
        super().build_extensions()


setup(
    name="horovod_spark",
    version="0.1.0",
    description="Horovod-style distributed deep learning on Apache Spark",
    packages=find_packages(include=["horovod_spark", "horovod_spark.*"]),
    ext_modules=[core],
    cmdclass={"build_ext": ParallelBuildExt},
    python_requires=">=3.9",
    install_requires=["numpy", "cloudpickle"],
    entry_points={"console_scripts": ["horovod-spark-run = horovod_spark.launcher.cli:main"]},
)
