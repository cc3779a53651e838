"""``horovod_spark.tensorflow.keras.elastic``: Horovod's path to ``horovod_spark.keras.elastic``."""
from horovod_spark.keras.elastic import *  # noqa: F401,F403
from horovod_spark.keras.elastic import __all__  # noqa: F401
