"""``horovod_spark.TorchDistributor``: pyspark's ``TorchDistributor`` on horovod_spark's launch.

``torch_distributor``: the driver side (the class, its checks, which launch runs the ranks);
``ddp_rank``: what each rank runs (the ``torch.distributed`` environment, then the user's function
or script). Resolved lazily by ``horovod_spark.__getattr__``; nothing here imports torch.
"""
