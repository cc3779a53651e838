"""The collectives as differentiable TensorFlow ops over lists of dense tensors.

Each function takes already-resolved core names and a process set, runs one bridge call for the
whole list and, when any input is floating point, attaches the gradient Horovod defines:
allreduce -> allreduce of the gradient (same op and scaling); allgather -> averaged gradient, this
rank's rows; broadcast -> averaged gradient on the root, zeros elsewhere; alltoall -> alltoall of
the gradient back with the received splits; reducescatter -> allgather of the gradient (times the
size for Sum), times the scale factors. These are horovod.tensorflow 0.28's conventions exactly, so
a ported model trains the same. Gradient collectives are named ``<forward name>.grad`` so they
match across ranks too.

On a process set of one rank every collective is the identity (times the pre/post scale), so it
is computed in TensorFlow without the core: a script run as one process pays nothing for its
collectives. ``SKIP_SINGLE_RANK`` exists so benchmarks can time the core path at size 1.

A rank that is not a member of the process set gets ``tf.errors.InvalidArgumentError`` from the
op, as from Horovod's (sets of one rank included); an unregistered set, or a ``process_set_id``
that names none, is a ValueError at the call.
"""
import tensorflow as tf

from horovod_spark.common.ops import check_reducescatter
from horovod_spark.common.process_sets import require_member
from horovod_spark.tensorflow import _bridge, array_collectives
from horovod_spark.tensorflow._op_args import Adasum, Average, Sum, check_root, ps_id, ps_rank

SKIP_SINGLE_RANK = True


def _single(process_set):
    return SKIP_SINGLE_RANK and process_set.size() == 1


def _scaled(x, scale):
    if scale == 1:
        return tf.identity(x)
    if x.dtype.is_floating:
        return x * tf.cast(scale, x.dtype)
    return tf.cast(tf.cast(x, tf.float64) * scale, x.dtype)


def _refusal(process_set, what):
    """Why this rank may not run ``what`` on ``process_set`` (not a member), or None."""
    try:
        require_member(process_set, what)
    except ValueError as exc:
        return str(exc)
    return None


def _differentiable(forward, tensors, backward):
    """``forward(tensors) -> outputs``; ``backward(dys, outputs) -> grads for floating inputs``."""
    if not any(t.dtype.is_floating for t in tensors):
        return forward(tensors)

    @tf.custom_gradient
    def op(*xs):
        ys = forward(list(xs))

        def grad(*dys):
            dys = [tf.zeros_like(y) if dy is None else dy for dy, y in zip(dys, ys)]
            grads = backward(dys, ys)
            return [g if x.dtype.is_floating else None for g, x in zip(grads, xs)]

        return ys, grad

    return list(op(*tensors))


def _grad_names(names):
    return [n + ".grad" for n in names]


def allreduce(tensors, names, op, prescale, postscale, process_set, groups=(), differentiable=True):
    """Reduce each tensor over the process set. ``groups``: lists of indices, each negotiated and
    fused as one unit. ``differentiable=False`` skips the gradient wrapper (reducing gradients)."""
    psid = ps_id(process_set)
    groups = [list(g) for g in groups]
    refusal = _refusal(process_set, "allreduce")

    def forward(xs):
        if refusal:
            return _bridge.refuse(refusal, [x.dtype for x in xs], [x.shape for x in xs], name="HorovodAllreduce")
        if _single(process_set):
            return [_scaled(x, prescale * postscale) for x in xs]
        return _bridge.run(lambda *a: array_collectives.start_allreduce(list(a), names, op, prescale, postscale,
                                                                        psid, groups),
                           xs, [x.dtype for x in xs], [x.shape for x in xs], name="HorovodAllreduce")

    def backward(dys, _ys):
        # (Adasum's gradient is the Adasum of the upstream gradients, as Horovod defines it)
        if op not in (Average, Sum, Adasum):
            raise NotImplementedError("the gradient of allreduce is defined for op=Average, Sum and Adasum "
                                      "only, not %s" % op.name)
        return allreduce(dys, _grad_names(names), op, prescale, postscale, process_set, groups)

    if not differentiable:
        return forward(list(tensors))
    return _differentiable(forward, tensors, backward)


def _all(tensors):
    return [list(range(len(tensors)))]


def allgather(tensors, names, process_set):
    """Concatenate each tensor over the process set along dim 0 (sizes may differ per rank)."""
    psid = ps_id(process_set)
    for t in tensors:
        if t.shape.rank == 0:
            raise ValueError("allgather concatenates along dimension 0, so it needs a tensor of at least one "
                             "dimension; got a scalar (use tf.reshape(tensor, [1]))")

    refusal = _refusal(process_set, "allgather")

    def forward(xs):
        shapes = [[None] + x.shape.as_list()[1:] if x.shape.rank is not None else None for x in xs]
        if refusal:
            return _bridge.refuse(refusal, [x.dtype for x in xs], shapes, name="HorovodAllgather")
        if _single(process_set):
            return [tf.identity(x) for x in xs]
        return _bridge.run(lambda *a: array_collectives.start_allgather(list(a), names, psid), xs,
                           [x.dtype for x in xs], shapes, name="HorovodAllgather")

    def backward(dys, _ys):
        # Every rank's loss may depend on this rank's rows: the upstream gradients averaged over
        # ranks (Horovod's convention: the gradient of the ranks' mean loss), restricted to the rows
        # this rank contributed.
        sizes = allgather([tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in tensors])],
                          [names[0] + ".grad.sizes"], process_set)[0]
        sizes = tf.reshape(sizes, [process_set.size(), len(tensors)])
        averaged = allreduce(dys, _grad_names(names), Average, 1.0, 1.0, process_set, _all(dys))
        me = ps_rank(process_set)
        grads = []
        for j, g in enumerate(averaged):
            start = tf.reduce_sum(sizes[:me, j])
            grads.append(g[start:start + sizes[me, j]])
        return grads

    return _differentiable(forward, tensors, backward)


def broadcast(tensors, names, root_rank, process_set):
    """Every rank gets the root's tensors."""
    psid = ps_id(process_set)
    root_rank = check_root(root_rank, process_set)
    refusal = _refusal(process_set, "broadcast")

    def forward(xs):
        if refusal:
            return _bridge.refuse(refusal, [x.dtype for x in xs], [x.shape for x in xs], name="HorovodBroadcast")
        if _single(process_set):
            return [tf.identity(x) for x in xs]
        return _bridge.run(lambda *a: array_collectives.start_broadcast(list(a), names, root_rank, psid), xs,
                           [x.dtype for x in xs], [x.shape for x in xs], name="HorovodBroadcast")

    def backward(dys, _ys):
        averaged = allreduce(dys, _grad_names(names), Average, 1.0, 1.0, process_set, _all(dys))
        if ps_rank(process_set) == root_rank:
            return averaged
        return [tf.zeros_like(g) for g in averaged]

    return _differentiable(forward, tensors, backward)


def alltoall(tensor, name, splits, process_set):
    """Send ``splits[r]`` rows of ``tensor`` to rank r; returns (received rows, received splits)."""
    psid = ps_id(process_set)
    if tensor.shape.rank == 0:
        raise ValueError("alltoall splits along dimension 0, so it needs a tensor of at least one dimension")
    out_shape = [None] + tensor.shape.as_list()[1:] if tensor.shape.rank is not None else None
    split_inputs = [] if splits is None else [tf.cast(tf.reshape(splits, [-1]), tf.int64)]
    refusal = _refusal(process_set, "alltoall")

    def forward(xs):
        if refusal:
            return _bridge.refuse(refusal, [xs[0].dtype, tf.int32], [out_shape, [None]], name="HorovodAlltoall")
        if _single(process_set):
            if not split_inputs:
                return [tf.identity(xs[0]), tf.reshape(tf.shape(xs[0], out_type=tf.int32)[0], [1])]
            splits32 = tf.cast(split_inputs[0], tf.int32)
            rows = tf.shape(xs[0], out_type=tf.int32)[0]
            check = tf.debugging.assert_equal(
                tf.reduce_sum(splits32), rows,
                message="alltoall of '%s': splits must have 1 entry summing to the first dimension" % name)
            with tf.control_dependencies([check]):
                return [tf.identity(xs[0]), tf.identity(splits32)]

        def start(a, *s):
            return array_collectives.start_alltoall(a, name, s[0] if s else None, psid)
        return _bridge.run(start, [xs[0]] + split_inputs, [xs[0].dtype, tf.int32],
                           [out_shape, [process_set.size()]], name="HorovodAlltoall")

    def backward(dys, ys):
        back, _ = alltoall(dys[0], name + ".grad", ys[1], process_set)
        return [back]

    out, received = _differentiable(forward, [tensor], backward)
    return out, received


def reducescatter(tensors, names, op, prescale, postscale, process_set):
    """Reduce each tensor and keep this rank's block of dim 0."""
    psid = ps_id(process_set)
    for t in tensors:
        if t.shape.rank is not None:
            check_reducescatter(t.shape.as_list(), op)
    refusal = _refusal(process_set, "reducescatter")

    def forward(xs):
        shapes = [[None] + x.shape.as_list()[1:] if x.shape.rank is not None else None for x in xs]
        if refusal:
            return _bridge.refuse(refusal, [x.dtype for x in xs], shapes, name="HorovodReducescatter")
        if _single(process_set):
            return [_scaled(x, prescale * postscale) for x in xs]
        return _bridge.run(lambda *a: array_collectives.start_reducescatter(list(a), names, op, prescale,
                                                                            postscale, psid),
                           xs, [x.dtype for x in xs], shapes, name="HorovodReducescatter")

    def backward(dys, _ys):
        if op not in (Average, Sum):
            raise NotImplementedError("the gradient of reducescatter is defined for op=Average and op=Sum only, "
                                      "not %s" % op.name)
        gathered = allgather(dys, _grad_names(names), process_set)
        scale = prescale * postscale * (process_set.size() if op == Sum else 1)
        return [g * tf.cast(scale, g.dtype) if scale != 1 else g for g in gathered]

    return _differentiable(forward, tensors, backward)
