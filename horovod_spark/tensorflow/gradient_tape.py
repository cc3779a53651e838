"""DistributedGradientTape: a tf.GradientTape whose ``gradient`` averages across ranks."""
import tensorflow as tf

from horovod_spark.common.process_sets import global_process_set
from horovod_spark.tensorflow._op_args import Average
from horovod_spark.tensorflow.compression import Compression
from horovod_spark.tensorflow.gradient_reduction import (
    LocalSources,
    ReduceSettings,
    local_layer_variables,
    reduce_gradients,
)

_PREFIX = "DistributedGradientTape"


class _DistributedTape:
    """Mixed in front of the user's tape class, so ``isinstance(tape, tf.GradientTape)`` and any
    behaviour of a GradientTape subclass are kept."""

    # Horovod's order: use_generic_names is the fourth positional parameter.
    def gradient(self, target, sources, output_gradients=None, use_generic_names=False,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients=output_gradients,
                                 unconnected_gradients=unconnected_gradients)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads)
        local = self._hvd_local.indices(flat_sources)
        reduced = reduce_gradients(flat_grads, self._hvd_settings, _PREFIX, flat_sources, local,
                                   label_names=not use_generic_names)
        return tf.nest.pack_sequence_as(grads, reduced)

    def register_local_source(self, source):
        """Keep ``source``'s gradient rank-local: it is not allreduced (only scaled by 1/size when
        ``scale_local_gradients``)."""
        self._hvd_local.add(source)


_classes = {}


def _distributed_class(tape_cls):
    cls = _classes.get(tape_cls)
    if cls is None:
        cls = type(tape_cls.__name__, (_DistributedTape, tape_cls), {"__module__": tape_cls.__module__})
        _classes[tape_cls] = cls
    return cls


def DistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                            sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=global_process_set, scale_local_gradients=True):
    """Wrap ``gradtape`` (recorded already or not) so ``gradient()`` returns gradients averaged
    over the process set (``op``), like ``horovod.tensorflow.DistributedGradientTape``.

    ``compression``: Compression.none / fp16 for dense gradients. ``sparse_as_dense``: densify
    tf.IndexedSlices before reducing instead of gathering them. ``gradient_predivide_factor``:
    divide by this before the sum and by size/factor after (op=Average only). ``groups``: an int
    (number of fused groups, like ``num_groups``) or lists of variables reduced as fused units.
    """
    if not isinstance(gradtape, tf.GradientTape):
        raise TypeError("DistributedGradientTape wraps a tf.GradientTape, got %s" % type(gradtape).__name__)
    cls = _distributed_class(type(gradtape))
    tape = cls.__new__(cls)
    # Share the recorded state: the wrapper stands in for the user's tape from here on. It is not
    # on TensorFlow's tape stack itself (the user's tape is, inside its ``with`` block, and pops
    # itself on leaving): a copy marked as recording would pop that same tape a second time in
    # gradient(), which crashes the process when the wrapping happened inside the block.
    tape.__dict__.update(gradtape.__dict__)
    tape._recording = False
    tape._hvd_settings = ReduceSettings(compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                                        gradient_predivide_factor=gradient_predivide_factor,
                                        num_groups=num_groups, groups=groups, process_set=process_set,
                                        scale_local_gradients=scale_local_gradients)
    tape._hvd_local = LocalSources()
    return tape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                                   sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0,
                                   num_groups=0, groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """A DistributedGradientTape whose ``local_layers`` (a Keras layer or list of them) keep
    rank-local gradients."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set,
                                   scale_local_gradients)
    for var in local_layer_variables(local_layers):
        tape.register_local_source(var)
    return tape
