"""HorovodStrategy: Lightning's data parallelism over horovod_spark's collectives.

Every rank of a job builds its own ``Trainer(strategy=HorovodStrategy())``; the launcher
(``horovod_spark.run``, ``run_local``, ``horovod-spark-run``) has already started the processes,
so the strategy starts none. Gradients are averaged by ``horovod_spark.torch.DistributedOptimizer``
wrapped around each optimizer the LightningModule configures; the module itself is not wrapped.

How Lightning's optimizer flow meets DistributedOptimizer: Lightning runs the forward and backward
passes inside the closure it hands to ``optimizer.step(closure)``, while ``DistributedOptimizer.step``
would average before calling the closure. So the wrapped optimizers step with their own
synchronization skipped, and the strategy averages right after the closure's backward pass, before
Lightning's ``on_before_optimizer_step`` hooks and gradient clipping: those see the averaged
gradients, as Horovod recommends. Under automatic optimization the DistributedOptimizer's
``backward_passes_per_step`` follows ``Trainer(accumulate_grad_batches=...)`` (also when a
GradientAccumulationScheduler changes it), so gradient accumulation sends one allreduce per step.
"""
from typing import Any, Callable, Dict, List, Optional, Union

from horovod_spark.lightning.requirement import require_lightning

require_lightning()

import torch  # noqa: E402
from lightning.fabric.utilities.seed import reset_seed  # noqa: E402
from lightning.pytorch.strategies import ParallelStrategy  # noqa: E402
from lightning.pytorch.trainer.states import TrainerFn  # noqa: E402
from lightning.pytorch.utilities.rank_zero import rank_zero_only  # noqa: E402
from lightning_utilities.core.rank_zero import rank_zero_only as utilities_rank_zero_only  # noqa: E402

import horovod_spark.torch as hvd  # noqa: E402
from horovod_spark.lightning import collectives, optimizers  # noqa: E402
from horovod_spark.lightning.environment import HorovodEnvironment, join_job  # noqa: E402


def _check_passes(passes):
    if passes is not None and (isinstance(passes, bool) or not isinstance(passes, int) or passes < 1):
        raise ValueError("backward_passes_per_step must be None or an int >= 1, got %r" % (passes,))


class HorovodStrategy(ParallelStrategy):
    """Data-parallel training of a ``lightning.pytorch.LightningModule`` on every rank of a
    horovod_spark job: ``lightning.pytorch.Trainer(strategy=HorovodStrategy(), ...)``.

    - **Gradients** are averaged as ``horovod_spark.torch.DistributedOptimizer`` averages them (the
      core fuses small tensors up to HOROVOD_FUSION_THRESHOLD); ``compression``, ``groups``,
      ``gradient_predivide_factor`` and ``sparse_as_dense`` are its arguments. The learning rate is
      not scaled: N ranks with batches of B step like one process with batches of N*B.
    - ``backward_passes_per_step``: under automatic optimization leave it None; set
      ``Trainer(accumulate_grad_batches=k)`` instead, which it follows. Under manual optimization
      it is how many ``manual_backward`` calls each ``optimizer.step()`` accumulates (default 1).
    - **Initial state**: rank 0's parameters and buffers (and, when fitting, optimizer state) are
      broadcast to every rank at setup, after any checkpoint was restored.
    - **Collectives**: ``self.log(..., sync_dist=True)`` (mean, sum, max, min), ``all_gather``
      (``sync_grads`` too), ``barrier`` and ``broadcast`` of picklable objects use the job's
      collectives; a ``group`` is None or a ``horovod_spark.torch.ProcessSet``.
    - **Rank 0 only**: checkpoint files and loggers write on global rank 0, as with Lightning's
      other parallel strategies; every rank sees the same early-stopping decision.
    - **Data**: map-style DataLoaders get a DistributedSampler (one shard per rank).
    - **Devices**: each rank uses one device, ``Trainer(devices=...)``'s devices taken round robin by
      ``hvd.local_rank()``: on CPU the CPU; with ``accelerator="gpu"`` a GPU per local rank.

    Only ``lightning.pytorch`` (the ``lightning`` package) is supported: ``pytorch_lightning`` is a
    separate copy of Lightning whose Trainer accepts only its own Strategy classes and whose
    LightningModule is not a ``lightning.pytorch.LightningModule``; port such code by importing
    ``lightning.pytorch as pl``.
    """

    strategy_name = "horovod"

    def __init__(self, accelerator=None, parallel_devices: Optional[List[torch.device]] = None,
                 checkpoint_io=None, precision_plugin=None, compression=hvd.Compression.none,
                 backward_passes_per_step: Optional[int] = None, gradient_predivide_factor: float = 1.0,
                 groups=None, sparse_as_dense: bool = False):
        _check_passes(backward_passes_per_step)
        super().__init__(accelerator=accelerator, parallel_devices=parallel_devices,
                         cluster_environment=HorovodEnvironment(), checkpoint_io=checkpoint_io,
                         precision_plugin=precision_plugin)
        self._backward_passes_per_step = backward_passes_per_step
        self._optimizer_options = dict(compression=compression, gradient_predivide_factor=gradient_predivide_factor,
                                       groups=groups, sparse_as_dense=sparse_as_dense)
        self._unwrapped: List[torch.optim.Optimizer] = []  # what configure_optimizers returned, in order

    # -- the job and its ranks -------------------------------------------------------------------

    @property
    def root_device(self) -> torch.device:
        devices = self.parallel_devices or [torch.device("cpu")]
        return devices[self.local_rank % len(devices)]

    @property
    def is_distributed(self) -> bool:
        # Lightning gives map-style DataLoaders a DistributedSampler when this is True.
        return True

    @property
    def distributed_sampler_kwargs(self) -> Dict[str, Any]:
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    def set_world_ranks(self) -> None:
        """Join the job (``hvd.init()`` unless done) and make Lightning's rank-zero-only output and
        the DataLoader workers' seeds use this rank. The Trainer calls it when it is built."""
        join_job()
        rank_zero_only.rank = utilities_rank_zero_only.rank = self.global_rank

    def setup_environment(self) -> None:
        self.set_world_ranks()
        # seed_everything(seed) seeded this process before the rank was known; start every rank from
        # that seed again, as Lightning's DDP does (no-op without seed_everything).
        reset_seed()
        super().setup_environment()

    def model_to_device(self) -> None:
        assert self.model is not None
        self.model.to(self.root_device)

    # -- setup: broadcast, wrap the optimizers -------------------------------------------------------

    def setup(self, trainer) -> None:
        fitting = trainer.state.fn == TrainerFn.FITTING
        passes = self._passes_per_step(trainer) if fitting else None
        super().setup(trainer)
        module = self.lightning_module
        hvd.broadcast_parameters(module.state_dict(), root_rank=0)
        if not fitting or not self.optimizers:
            return
        self._unwrapped = list(self.optimizers)
        wrapped = optimizers.wrap(module, self._unwrapped, passes, self._optimizer_options)
        optimizers.follow_wrapped(self.lr_scheduler_configs,
                                  {id(o): w for o, w in zip(self._unwrapped, wrapped)})
        for optimizer in wrapped:
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        self.optimizers = wrapped

    def _passes_per_step(self, trainer) -> int:
        if not self.lightning_module.automatic_optimization:
            return self._backward_passes_per_step or 1
        accumulate = trainer.accumulate_grad_batches
        if self._backward_passes_per_step not in (None, accumulate):
            raise ValueError("HorovodStrategy(backward_passes_per_step=%d) applies to manual optimization only; "
                             "under automatic optimization set Trainer(accumulate_grad_batches=%d) instead "
                             "(it is %d now)" % (self._backward_passes_per_step, self._backward_passes_per_step,
                                                 accumulate))
        return accumulate

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # A GradientAccumulationScheduler changes accumulate_grad_batches at an epoch's start,
        # when no gradients are being accumulated.
        module = self.lightning_module
        if module is None or not module.automatic_optimization:
            return
        accumulate = module.trainer.accumulate_grad_batches
        for optimizer in self.optimizers:
            if hasattr(optimizer, "set_backward_passes_per_step") and optimizer.backward_passes_per_step != accumulate:
                optimizer.set_backward_passes_per_step(accumulate)

    # -- the optimizer step ---------------------------------------------------------------------

    def optimizer_step(self, optimizer, closure: Callable[[], Any], model=None, **kwargs: Any) -> Any:
        synchronize = getattr(optimizer, "synchronize", None)
        if synchronize is None:  # not one of ours (e.g. an optimizer the module built by hand)
            return super().optimizer_step(optimizer, closure, model, **kwargs)

        def closure_then_average():
            result = closure()
            synchronize()
            return result

        with optimizer.skip_synchronize():
            return super().optimizer_step(optimizer, closure_then_average, model, **kwargs)

    # -- collectives ----------------------------------------------------------------------------

    def reduce(self, tensor, group: Optional[Any] = None, reduce_op: Optional[Union[str, Any]] = "mean"):
        """``tensor`` reduced over the ranks (mean by default); anything but a tensor is returned as is."""
        if not isinstance(tensor, torch.Tensor):
            return tensor
        return collectives.reduce(tensor, collectives.reduce_op(reduce_op), collectives.process_set(group))

    def all_gather(self, tensor: torch.Tensor, group: Optional[Any] = None, sync_grads: bool = False) -> torch.Tensor:
        """Every rank's ``tensor`` stacked along a new first dimension (same shape on every rank)."""
        return collectives.all_gather(tensor, collectives.process_set(group), sync_grads)

    def barrier(self, name: Optional[str] = None) -> None:
        hvd.barrier()

    def broadcast(self, obj, src: int = 0):
        return hvd.broadcast_object(obj, root_rank=src)

    # -- teardown ---------------------------------------------------------------------------------

    def teardown(self) -> None:
        # Give the module back its own optimizers: the wrapped ones' gradient hooks must not fire
        # in a later fit of the same module.
        if self._unwrapped:
            wrapped = list(self.optimizers)
            optimizers.follow_wrapped(self.lr_scheduler_configs,
                                      {id(w): o for w, o in zip(wrapped, self._unwrapped)})
            self.optimizers = self._unwrapped
            self._unwrapped = []
        super().teardown()
