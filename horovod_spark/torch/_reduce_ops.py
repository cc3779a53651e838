"""Asynchronous reductions: allreduce (single, grouped, sparse) and reducescatter.

Signatures, defaults and return values follow horovod.torch 0.28; every function returns a handle
for ``poll``/``synchronize``.
"""

import torch

from horovod_spark.common import ops as _core
from horovod_spark.common.op_resolution import handle_average_backwards_compatibility, reduce_op
from horovod_spark.common.process_sets import global_process_set
from horovod_spark.torch import _buffers, _data_ops, _handles, _nccl, _staging
from horovod_spark.torch._data_ops import allgather_async
from horovod_spark.torch._handles import synchronize

_ReduceOp = _core.ReduceOp
Average = _ReduceOp.Average
Sum = _ReduceOp.Sum
Adasum = _ReduceOp.Adasum
Min = _ReduceOp.Min
Max = _ReduceOp.Max
Product = _ReduceOp.Product
# Ops the prechecked blocking path takes (ReduceOp members are ints, so plain ints match too).
_PLAIN_OP_CODES = {int(o): int(o) for o in (Average, Sum, Min, Max, Product)}
_CPU_DTYPE_CODES = _buffers.CORE_DTYPE_CODES
# Bound once for the hot paths: torch's module __getattr__ keeps CPython from caching ``torch.X``.
_Tensor = torch.Tensor
_empty_like = torch.empty_like


def core_op(op):
    return int(reduce_op(op))


def _plain_codes(tensor, op):
    """(dtype code, op code) when ``tensor`` is a contiguous CPU tensor of a supported dtype and
    ``op`` a plain reduction: all the core's prechecked entry points need. None otherwise: the
    checked path then names the problem."""
    if not (isinstance(tensor, _Tensor) and tensor.is_cpu) or _staging.cpu_on_staging_thread:
        return None
    dtype_code = _CPU_DTYPE_CODES.get(tensor.dtype)
    try:
        code = _PLAIN_OP_CODES.get(op)
    except TypeError:  # unhashable
        return None
    if dtype_code is None or code is None or not tensor.is_contiguous():  # (sparse: not contiguous)
        return None
    return dtype_code, code


def _enqueue_plain(tensor, inplace, core_name, codes, prescale_factor, postscale_factor, process_set):
    """The direct path of an async allreduce of a tensor ``_plain_codes`` accepted (``codes``):
    one call into the core."""
    ps_id = 0 if process_set is global_process_set else _handles.process_set_id(process_set)
    if inplace:
        ptr = tensor.data_ptr()
        core_handle = _core.enqueue_allreduce_prechecked(core_name, ptr, ptr, codes[0], tensor.shape, codes[1],
                                                         float(prescale_factor), float(postscale_factor), ps_id)
        return _handles.register_result(core_handle, tensor, None)
    out = _empty_like(tensor)  # (contiguous, as tensor is: empty_like keeps its strides)
    core_handle = _core.enqueue_allreduce_prechecked(core_name, tensor.data_ptr(), out.data_ptr(), codes[0],
                                                     tensor.shape, codes[1], float(prescale_factor),
                                                     float(postscale_factor), ps_id)
    return _handles.register_result(core_handle, out, tensor)  # tensor: the core still reads it


def allreduce_named_async_(tensor, core_name, name, op, prescale_factor, postscale_factor, process_set):
    """``allreduce_async_(tensor, name=name, ...)`` for a caller that built the core's name,
    ``"allreduce." + name``, once: DistributedOptimizer, once per gradient per step."""
    # _plain_codes, inlined.
    if isinstance(tensor, _Tensor) and tensor.is_cpu and not _staging.cpu_on_staging_thread:
        dtype_code = _CPU_DTYPE_CODES.get(tensor.dtype)
        try:
            code = _PLAIN_OP_CODES.get(op)
        except TypeError:  # unhashable: the checked path names it
            code = None
        if dtype_code is not None and code is not None and tensor.is_contiguous():
            ptr = tensor.data_ptr()
            ps_id = 0 if process_set is global_process_set else _handles.process_set_id(process_set)
            core_handle = _core.enqueue_allreduce_prechecked(core_name, ptr, ptr, dtype_code, tensor.shape, code,
                                                             float(prescale_factor), float(postscale_factor), ps_id)
            return _handles.register_result(core_handle, tensor, None)
    return _launch_allreduce(tensor, True, name, op, prescale_factor, postscale_factor, process_set)


def cpu_dtype_code(tensor):
    """The core's dtype code of a CPU tensor's dtype, or None (another device, an unsupported dtype)."""
    return _CPU_DTYPE_CODES.get(tensor.dtype) if tensor.device.type == "cpu" else None


def plain_op_code(op):
    """The core's code of a plain reduction ``op`` while CPU tensors go straight to the core (not
    through the staging thread, as tests can ask), or None."""
    if _staging.cpu_on_staging_thread:
        return None
    try:
        return _PLAIN_OP_CODES.get(op)
    except TypeError:  # unhashable
        return None


def allreduce_batch_(core_names, ptrs, dtype_codes, shapes, op_code, prescale_factor, postscale_factor,
                     process_set):
    """In-place allreduces of contiguous CPU tensors at ``ptrs`` (with their ``cpu_dtype_code`` and
    shapes), named ``core_names`` as ``allreduce_named_async_`` names them, queued in one call into
    the core. Returns the core handles, for ``ops.wait_all``; the caller keeps the tensors alive
    until then."""
    ps_id = 0 if process_set is global_process_set else _handles.process_set_id(process_set)
    return _core.enqueue_allreduce_batch(core_names, ptrs, dtype_codes, shapes, op_code, float(prescale_factor),
                                         float(postscale_factor), ps_id)


def _launch_allreduce(tensor, inplace, name, op, prescale_factor, postscale_factor, process_set):
    codes = _plain_codes(tensor, op)
    if codes is not None:
        core_name = _data_ops.core_name("allreduce", name, process_set)
        return _enqueue_plain(tensor, inplace, core_name, codes, prescale_factor, postscale_factor, process_set)
    dtype = _buffers.check_tensor(tensor)
    code = core_op(op)
    core_name = _handles.op_name("allreduce", name, process_set)
    if tensor.is_cuda and _nccl.chosen("allreduce", tensor, process_set, code, prescale_factor, postscale_factor):
        return _nccl.allreduce(tensor, inplace, core_name, code, prescale_factor, postscale_factor, process_set)
    ps_id = _handles.process_set_id(process_set)
    stage = _staging.begin(tensor.device)
    src = stage.host(tensor)
    out = src if inplace else stage.host_empty(src)
    core_handle = stage.submit(lambda: _core.allreduce_async(core_name, src.data_ptr(), out.data_ptr(), dtype,
                                                             tuple(src.shape), code, float(prescale_factor),
                                                             float(postscale_factor), ps_id))
    if out is tensor:
        # In place on the caller's own memory (DistributedOptimizer's case on CPU): nothing to finish.
        return _handles.register_result(core_handle, tensor, None)
    if not inplace and out.device == tensor.device:
        return _handles.register_result(core_handle, out, src)  # src: the core still reads it

    def finish(_results):
        if inplace:  # on a non-contiguous or device tensor: the result goes back into it
            stage.copy_into(tensor, out)
            return tensor
        return stage.to_device(out)

    return _handles.register(core_handle, (tensor, src, out), finish)


def allreduce_now(tensor, inplace, name, op, prescale_factor, postscale_factor, process_set):
    """Blocking allreduce (``allreduce_`` / the forward of ``allreduce``): the result tensor.

    This is the latency path of small synchronous allreduces (a few microseconds in all, of which
    this function is a few hundred nanoseconds): a contiguous CPU tensor of a supported dtype with
    a plain op goes straight to the core's prechecked entry point; anything else takes the async
    path, whose full checks raise the errors. The checks of ``_plain_codes`` and the str case of
    ``_data_ops.core_name`` are written out here: each Python call saved is about a tenth of a
    microsecond of a 4 KiB call."""
    if isinstance(tensor, _Tensor) and tensor.is_cpu and not _staging.cpu_on_staging_thread:
        dtype_code = _CPU_DTYPE_CODES.get(tensor.dtype)
        try:
            code = _PLAIN_OP_CODES.get(op)
        except TypeError:  # unhashable: the checked path names it
            code = None
        if dtype_code is not None and code is not None and tensor.is_contiguous():  # (sparse: not contiguous)
            core_name = "allreduce." + name if type(name) is str else _data_ops.core_name("allreduce", name,
                                                                                          process_set)
            ps_id = 0 if process_set is global_process_set else _handles.process_set_id(process_set)
            if inplace:
                out = tensor
                in_ptr = out_ptr = tensor.data_ptr()
            else:
                out = _empty_like(tensor)  # (contiguous, as tensor is: empty_like keeps its strides)
                in_ptr, out_ptr = tensor.data_ptr(), out.data_ptr()
            # torch.Size is a tuple: the binding reads it as the shape directly; the scale factors
            # go as given (the binding converts any real number, as float() would).
            outcome = _core.run_allreduce_prechecked(core_name, in_ptr, out_ptr, dtype_code, tensor.shape, code,
                                                     prescale_factor, postscale_factor, ps_id)
            if outcome is not True:
                _core.finish_run(outcome)
            return out
    return synchronize(_launch_allreduce(tensor, inplace, name, op, prescale_factor, postscale_factor, process_set))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Start reducing ``tensor`` over the process set into a new tensor; ``tensor`` is unchanged."""
    op = handle_average_backwards_compatibility(op, average)
    return _launch_allreduce(tensor, False, name, op, prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Start reducing ``tensor`` in place; ``synchronize`` returns ``tensor`` itself."""
    if op is None or average is not None:  # (an explicit op alone needs no resolving)
        op = handle_average_backwards_compatibility(op, average)
    return _launch_allreduce(tensor, True, name, op, prescale_factor, postscale_factor, process_set)


def _launch_grouped_allreduce(tensors, inplace, name, op, prescale_factor, postscale_factor, process_set):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped allreduce needs at least one tensor")
    dtypes = [_buffers.check_tensor(t) for t in tensors]
    op_code = core_op(op)
    stage = _staging.begin(_buffers.check_same_device(tensors))
    srcs = [stage.host(t) for t in tensors]
    outs = srcs if inplace else [stage.host_empty(s) for s in srcs]
    in_ptrs = [s.data_ptr() for s in srcs]
    out_ptrs = in_ptrs if inplace else [o.data_ptr() for o in outs]
    shapes = [s.shape for s in srcs]
    base = _handles.op_name("grouped_allreduce", name, process_set)
    args = (op_code, float(prescale_factor), float(postscale_factor), _handles.process_set_id(process_set))
    if dtypes.count(dtypes[0]) == len(dtypes):  # the usual case: one packed request, no regrouping
        def enqueue():
            return [_core.grouped_allreduce_async(base, in_ptrs, out_ptrs, dtypes[0], shapes, *args)]
    else:
        def enqueue():
            return [h for _, h in _core.grouped_allreduce_by_dtype(base, in_ptrs, out_ptrs, dtypes, shapes, *args)]
    core_handles = stage.submit(enqueue)

    def finish(_results):
        if not inplace:
            return [stage.to_device(o) for o in outs]
        for t, buf in zip(tensors, outs):
            stage.copy_into(t, buf)
        return list(tensors)

    return _handles.register(core_handles, (tensors, srcs, outs), finish)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Start reducing a list of tensors as one fused unit; ``synchronize`` returns a list."""
    op = handle_average_backwards_compatibility(op, average)
    return _launch_grouped_allreduce(tensors, False, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place ``grouped_allreduce_async``; ``synchronize`` returns the input tensors."""
    op = handle_average_backwards_compatibility(op, average)
    return _launch_grouped_allreduce(tensors, True, name, op, prescale_factor, postscale_factor, process_set)


def _check_reducescatter(tensor, op):
    """(core dtype, core op) of a valid reducescatter; Horovod's errors otherwise (see
    ops.check_reducescatter), raised before anything is queued."""
    dtype = _buffers.check_tensor(tensor)
    code = core_op(Average if op is None else op)
    _core.check_reducescatter(tensor.shape, code)
    return dtype, code


def _enqueue_reducescatter(src, core_name, checked, prescale_factor, postscale_factor, ps_id):
    dtype, code = checked
    return lambda: _core.reducescatter_async(core_name, src.data_ptr(), dtype, tuple(src.shape), code,
                                             float(prescale_factor), float(postscale_factor), ps_id)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Start reducing ``tensor`` and scattering dim 0: this rank gets its block (earlier ranks get
    the remainder of an uneven split)."""
    checked = _check_reducescatter(tensor, op)
    core_name = _handles.op_name("reducescatter", name, process_set)
    if tensor.is_cuda and _nccl.chosen("reducescatter", tensor, process_set, checked[1], prescale_factor,
                                       postscale_factor):
        return _nccl.reducescatter(tensor, core_name, checked[1], prescale_factor, postscale_factor, process_set)
    stage = _staging.begin(tensor.device)
    src = stage.host(tensor)
    core_handle = stage.submit(_enqueue_reducescatter(src, core_name, checked, prescale_factor, postscale_factor,
                                                      _handles.process_set_id(process_set)))
    out_dtype = tensor.dtype

    def finish(results):
        raw, shape = results[0]
        return stage.to_device(_buffers.from_core(raw, shape, out_dtype))

    return _handles.register(core_handle, (tensor, src), finish)


def reducescatter_now(tensor, name, op, process_set, prescale_factor, postscale_factor):
    """Blocking reducescatter (``reducescatter`` when autograd records nothing): this rank's block."""
    code = _data_ops.direct_dtype_code(tensor)
    op_code = plain_op_code(Average if op is None else op)
    if code is None or op_code is None or tensor.dim() == 0:
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))
    ps_id, n = _data_ops.set_id_and_size(process_set)
    me = _data_ops.rank_in_set(process_set)
    name = _data_ops.core_name("reducescatter", name, process_set)
    rows = tensor.shape[0]
    out = _data_ops.output_for(tensor, rows // n + (1 if me < rows % n else 0))  # this rank's block
    outcome = _core.run_reducescatter_prechecked(name, tensor.data_ptr(), 0 if out is None else out.data_ptr(),
                                                 0 if out is None else out.nbytes, code, tensor.shape, op_code,
                                                 float(prescale_factor), float(postscale_factor), ps_id)
    return _data_ops.output_of(out, outcome, tensor.dtype)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """``reducescatter_async`` over a list; ``synchronize`` returns a list."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped reducescatter needs at least one tensor")
    checked = [_check_reducescatter(t, op) for t in tensors]  # every member before any is queued
    stage = _staging.begin(_buffers.check_same_device(tensors))
    base = _handles.op_name("grouped_reducescatter", name, process_set)
    names = ["%s.%dof%d" % (base, i, len(tensors)) for i in range(len(tensors))]
    ps_id = _handles.process_set_id(process_set)
    _core.check_names_free(names, ps_id)
    srcs = [stage.host(t) for t in tensors]
    enqueues = [_enqueue_reducescatter(s, n, c, prescale_factor, postscale_factor, ps_id)
                for s, n, c in zip(srcs, names, checked)]
    core_handle = stage.submit(lambda: [enqueue() for enqueue in enqueues])
    out_dtypes = [t.dtype for t in tensors]

    def finish(results):
        return [stage.to_device(_buffers.from_core(raw, shape, dtype))
                for (raw, shape), dtype in zip(results, out_dtypes)]

    return _handles.register(core_handle, (tensors, srcs), finish)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduce a sparse COO tensor by allgathering its indices and values.

    Returns a callable (not a handle, as in Horovod) that waits and returns the reduced sparse
    tensor; duplicate indices from different ranks add up when the result is coalesced.
    """
    t = tensor.coalesce()
    base = name if name is not None else _handles.op_name("sparse_allreduce", None, process_set)
    _core.check_names_free(["allgather.%s.indices" % base, "allgather.%s.values" % base],
                           _handles.process_set_id(process_set))
    indices_handle = allgather_async(t.indices().t().contiguous(), name="%s.indices" % base,
                                     process_set=process_set)
    values_handle = allgather_async(t.values(), name="%s.values" % base, process_set=process_set)

    def wait():
        values = synchronize(values_handle)
        indices = synchronize(indices_handle)
        if int(op) == int(Average):
            values = values / process_set.size()
        # Every index came from a valid sparse tensor of this shape; re-checking costs a pass.
        return torch.sparse_coo_tensor(indices.t(), values, t.size(), check_invariants=False)

    return wait
