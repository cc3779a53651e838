"""Keras callbacks of ``horovod.tensorflow.keras.callbacks``, for Keras 3."""
from horovod_spark.keras._broadcast_callback import BroadcastGlobalVariablesCallback
from horovod_spark.keras._checkpoint_callback import BestModelCheckpoint
from horovod_spark.keras._lr_callbacks import LearningRateScheduleCallback, LearningRateWarmupCallback
from horovod_spark.keras._metric_average_callback import MetricAverageCallback

__all__ = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback", "LearningRateScheduleCallback",
           "LearningRateWarmupCallback", "BestModelCheckpoint"]
