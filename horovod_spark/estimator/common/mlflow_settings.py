"""What MLflow tracking of fits needs without importing MLflow: the ``mlflow_tracking`` Param's
values, how a Param's value is written as an MLflow param, and the versions tagged on a run."""
import sys
from importlib import metadata
from typing import Dict

INSTALL_HINT = "pip install horovod-spark[mlflow]"
# How long the fit waits at its end for the tracking server to take what is queued (the model
# above all), and how long the first request to an HTTP server may take before it counts as
# unreachable.
FINISH_SECONDS = 120.0
PROBE_SECONDS = 5.0
# MLflow's limit on a param's value (mlflow.utils.validation.MAX_PARAM_VAL_LENGTH).
PARAM_VALUE_LIMIT = 6000
MODES = ("auto", "on", "off")
_ALIASES = {True: "on", False: "off", "true": "on", "false": "off"}
# The distributions whose versions are tagged on a run, per framework (pyspark and ours always).
_FRAMEWORK_PACKAGES = {"torch": ("torch",), "keras": ("tensorflow", "keras"), "lightning": ("torch", "lightning")}


def tracking_mode(value) -> str:
    """'auto', 'on' or 'off' from the Param's value: those names, or True / False."""
    key = value.lower() if isinstance(value, str) else value
    if isinstance(key, bool) or key in _ALIASES:
        return _ALIASES[key]
    if key in MODES:
        return key
    raise TypeError("mlflow_tracking must be 'auto' (track when an MLflow run is active), True/'on' (always; a "
                    "run of its own when none is active) or False/'off', got %r" % (value,))


def logged_value(value) -> str:
    """A Param's value as an MLflow param: a string as it is, anything else as its repr, cut to
    MLflow's length limit."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > PARAM_VALUE_LIMIT:
        text = text[:PARAM_VALUE_LIMIT - 3] + "..."
    return text


def package_versions(framework: str) -> Dict[str, str]:
    """{distribution: version} of horovod_spark, pyspark and the framework's packages that are installed."""
    import horovod_spark
    versions = {"horovod_spark": horovod_spark.__version__}
    for name in ("pyspark",) + _FRAMEWORK_PACKAGES.get(framework, ()):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            module = sys.modules.get(name)
            if getattr(module, "__version__", None):
                versions[name] = module.__version__
    return versions
