"""Horovod's collective errors under their Horovod-style path (``horovod.common.exceptions``).

The classes live in ``horovod_spark.exceptions``, with every other exception horovod_spark raises.
"""
from horovod_spark.exceptions import (
                                      HorovodCollectiveError,
                                      HorovodInternalError,
                                      HorovodTimeoutError,
                                      HostsUpdatedInterrupt,
)

__all__ = ["HorovodInternalError", "HorovodCollectiveError", "HorovodTimeoutError", "HostsUpdatedInterrupt"]
