"""``horovod_spark.tensorflow.keras``: Horovod's path to the Keras API (``horovod.tensorflow.keras``),
so ``import horovod.tensorflow.keras as hvd`` ports by changing ``horovod.`` to ``horovod_spark.``.
Every name is ``horovod_spark.keras``'s.
"""
from horovod_spark.keras import *  # noqa: F401,F403 - the whole API, listed in horovod_spark.keras.__all__
from horovod_spark.keras import __all__  # noqa: F401
from horovod_spark.tensorflow.keras import (
    callbacks,  # noqa: F401 - Horovod's path, the same classes
    elastic,  # noqa: F401 - Horovod's path, the same classes
)
