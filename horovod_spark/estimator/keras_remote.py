"""What every rank runs for KerasEstimator.fit: rebuild and compile the model with a
DistributedOptimizer, resume if asked, ``model.fit`` on this rank's shard with the broadcast and
metric-average callbacks plus the user's, checkpoint (rank 0), report progress (rank 0).

Resumption restores weights, optimizer variables and history exactly, and the reader's row order
is a function of (seed, epoch); Keras layers' own random state (dropout) is not part of the
checkpoint.
"""
import dataclasses
import os
import pickle
import tempfile
import warnings

import numpy as np

from horovod_spark.common import config

from .common import rank_device
from .common.checkpoint import CheckpointStore, resumes
from .common.history import History
from .common.rank_data import report_cache, set_mp_start_method
from .common.rank_trainer import RankTrainer
from .common.shapes import per_row_shape

CHECKPOINT_FORMAT = 1


def train(spec):
    set_mp_start_method(spec)
    # Before TensorFlow starts: its thread pools are sized once per process.
    without_gpu = _configure_tensorflow(spec.use_gpu)
    import horovod_spark.keras as hvd
    hvd.init()
    try:
        fallback = rank_device.cpu_fallback(spec.use_gpu, spec.gpu_notice, without_gpu, rank_device.TENSORFLOW_NO_GPU)
        trainer = _KerasTrainer(spec, hvd, fallback)
        if not spec.elastic:  # an elastic fit reports at each (re)start instead
            rank_device.report_devices(hvd, trainer.cpu_fallback)
        return trainer.run()
    finally:
        hvd.shutdown()


def _configure_tensorflow(use_gpu: bool) -> bool:
    """Size TF's thread pools and choose the rank's GPU, before TF starts; True when use_gpu=True
    found no GPU (the rank then trains on CPU)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    local_size = config.LOCAL_SIZE.get(default=1)
    local_rank = config.LOCAL_RANK.get(default=0)
    try:
        # Ranks sharing a host would otherwise each start a thread per core and fight over them.
        threads = max(1, (os.cpu_count() or 1) // max(1, local_size))
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        pass  # TensorFlow already runs in this process; its pools stay as they are
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return use_gpu
    try:
        if not use_gpu:
            tf.config.set_visible_devices([], "GPU")
            return False
        from horovod_spark.spark.task.gpus import rank_gpu
        gpu = gpus[rank_gpu(local_rank, len(gpus))]
        tf.config.set_visible_devices(gpu, "GPU")
        tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError:
        pass  # TensorFlow already initialised its devices in this process; they stay as they are
    return False


def load_checkpoint(data: bytes) -> dict:
    # Written by this run's own rank 0 into the user's store: as trusted as the pickled model.
    state = pickle.loads(data)
    if state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError("checkpoint format %r is not %r" % (state.get("format"), CHECKPOINT_FORMAT))
    return state


class _KerasTrainer(RankTrainer):
    def __init__(self, spec, hvd, cpu_fallback=None):
        import keras

        from . import keras_io, keras_payload
        self.spec, self.hvd, self.keras = spec, hvd, keras
        self.cpu_fallback = cpu_fallback  # see rank_device.report_devices
        self.rank, self.size = hvd.rank(), hvd.size()
        keras.utils.set_random_seed(int(np.random.SeedSequence([spec.seed, self.rank]).generate_state(1)[0]))
        parts = keras_payload.unpack(spec.payload)
        self.custom_objects = parts["custom_objects"]
        self.model = keras_io.model_from_bytes(parts["model"], self.custom_objects)
        args = parts["compile"]
        compression = self.compression(parts["compression"])
        self.optimizer = hvd.DistributedOptimizer(args.build_optimizer(), compression=compression,
                                                  backward_passes_per_step=spec.backward_passes_per_step,
                                                  average_aggregated_gradients=True)
        args.compile(self.model, self.optimizer)
        self.user_callbacks = parts["callbacks"]
        self.checkpoint_callback = parts["checkpoint_callback"]
        self.history = History()
        self.output_shapes = None
        if resumes(spec):
            self._restore(load_checkpoint(spec.store.read_bytes(spec.resume_path)))
        self.transformation_fn = parts["transformation_fn"]
        self.checkpoints = CheckpointStore(spec.store, spec.run_id, keep=spec.keep_checkpoints)
        self.place()

    def _restore(self, state):
        self.model.set_weights(state["weights"])
        if not self.optimizer.built:
            self.optimizer.build(self.model.trainable_variables)
        if len(self.optimizer.variables) != len(state["optimizer"]):
            raise ValueError("the checkpoint holds %d optimizer variables, the optimizer has %d: was the run started "
                             "with another optimizer?" % (len(state["optimizer"]), len(self.optimizer.variables)))
        for variable, value in zip(self.optimizer.variables, state["optimizer"]):
            variable.assign(value)
        self.history = History(state["history"])
        self.output_shapes = state.get("output_shapes")

    def checkpoint_bytes(self, epochs_done: int) -> bytes:
        return pickle.dumps({"format": CHECKPOINT_FORMAT, "epochs_done": epochs_done,
                             "weights": self.model.get_weights(),
                             "optimizer": [np.asarray(v) for v in self.optimizer.variables],
                             "history": self.history.to_dict(), "output_shapes": self.output_shapes},
                            protocol=pickle.HIGHEST_PROTOCOL)

    # -- the run ---------------------------------------------------------------------------------
    def run(self):
        from .keras_rank_callback import EstimatorCallback
        spec = self.spec
        with tempfile.TemporaryDirectory(prefix="hs-keras-rank%d-" % self.rank) as scratch:
            best_path = self._prepare_checkpoint_callback(scratch)
            if spec.elastic:
                from .keras_elastic import fit_elastic
                fit_elastic(self)
            elif spec.start_epoch < spec.epochs:
                self._fit(EstimatorCallback(self))
            else:
                # Resuming a run that already completed every epoch: nothing left to train.
                self.reporter.train_begin(spec.epochs, spec.start_epoch, self.train_reader.steps_per_epoch,
                                          self.val_steps, spec.run_id)
                self.reporter.train_end()
            self.close_scalars()
            report_cache(spec, self.rank, self.train_reader, self.val_reader)
            if self.rank != 0:
                return None
            if best_path is not None and os.path.exists(best_path):
                self._load_best(best_path)
            return self._result()

    def _fit(self, estimator_callback, start_epoch=None, more_callbacks=()):
        """``model.fit`` from ``start_epoch`` (default: the spec's) to the last epoch; ``more_callbacks``
        run after the estimator's own."""
        from . import keras_data
        hvd, spec = self.hvd, self.spec
        if start_epoch is not None:
            spec = dataclasses.replace(spec, start_epoch=start_epoch)
        input_shapes = keras_data.input_shapes_for(self.model, spec.input_shapes, len(spec.feature_cols))
        if input_shapes != spec.input_shapes:
            spec = dataclasses.replace(spec, input_shapes=input_shapes)
        floatx = self.keras.config.floatx()
        dataset, batches, first = keras_data.train_dataset(self.train_reader, spec, floatx, spec.start_epoch,
                                                           spec.epochs - spec.start_epoch)
        try:
            val = None if self.val_reader is None else keras_data.val_dataset(
                self.val_reader, spec, floatx, self.rank, self.size, keras_data.signature(first))
            # An elastic fit's state.sync() broadcasts instead, after every reset too.
            callbacks = [] if spec.elastic else [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
            callbacks += [hvd.callbacks.MetricAverageCallback()] + list(self.user_callbacks)
            if self.checkpoint_callback is not None and self.rank == 0:
                callbacks.append(self.checkpoint_callback)
            callbacks.append(estimator_callback)
            callbacks += list(more_callbacks)
            with warnings.catch_warnings():
                # Validation runs each rank's shard to its end, which Keras reports as running out of data.
                warnings.filterwarnings("ignore", message=".*ran out of data.*")
                self.model.fit(dataset, steps_per_epoch=self.train_reader.steps_per_epoch, epochs=spec.epochs,
                               initial_epoch=spec.start_epoch, validation_data=val, callbacks=callbacks, verbose=0,
                               shuffle=False)
            if self.output_shapes is None:
                x = first[0]
                one_row = tuple(a[:1] for a in x) if isinstance(x, tuple) else x[:1]
                outputs = self.model.predict_on_batch(one_row)
                outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
                self.output_shapes = [per_row_shape(np.asarray(o)) for o in outputs]
        finally:
            batches.close()

    def _prepare_checkpoint_callback(self, scratch: str):
        """Point the user's ModelCheckpoint at a local file of rank 0; its best model becomes the result.
        Weights only: the result needs nothing else, and a full save would also serialize the loss,
        which Keras cannot do for every function."""
        callback = self.checkpoint_callback
        # In an elastic fit any rank may become rank 0 after a reset: every rank points its copy
        # at its own file, and only rank 0's runs.
        if callback is None or (self.rank != 0 and not self.spec.elastic):
            return None
        path = os.path.join(scratch, "best.weights.h5")
        callback.filepath = path
        callback.save_weights_only = True
        return path

    def _load_best(self, path: str):
        self.model.load_weights(path)

    def _result(self) -> dict:
        from . import keras_io
        return {"model": keras_io.model_to_bytes(self.model), "history": self.history.to_dict(),
                "output_shapes": self.output_shapes, "epochs": self.history.epochs}
