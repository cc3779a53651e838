"""``horovod_spark.tensorflow.keras.callbacks``: Horovod's path to ``horovod_spark.keras.callbacks``."""
from horovod_spark.keras.callbacks import *  # noqa: F401,F403
from horovod_spark.keras.callbacks import __all__  # noqa: F401
