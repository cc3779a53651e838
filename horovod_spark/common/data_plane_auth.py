"""HOROVOD_SPARK_DATA_PLANE_AUTH as the launchers hand it to every rank: the driver resolves it
once (when unset, HOROVOD_SPARK_TLS decides, as in the core) and each rank gets that value, so the
two ends of every link agree (docs/security.md)."""
from typing import Dict, Mapping, Optional

from horovod_spark.common import config


def resolved(environ: Optional[Mapping[str, str]] = None) -> bool:
    """The setting as the core would read it from ``environ``."""
    return bool(config.DATA_PLANE_AUTH.get(environ, default=config.SPARK_TLS.get(environ)))


def rank_env(on: bool) -> Dict[str, str]:
    """The rank environment entry that fixes the setting to the driver's ``on``."""
    return {config.DATA_PLANE_AUTH.name: "on" if on else "off"}
