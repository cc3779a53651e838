"""SyncBatchNorm: batch normalization whose training statistics span every rank's batch."""
import torch
import torch.nn.functional as F
from torch.autograd import Function
from torch.nn.modules.batchnorm import _BatchNorm

from horovod_spark.common import basics as _basics
from horovod_spark.common.process_sets import global_process_set
from horovod_spark.torch._data_ops import allgather_async
from horovod_spark.torch._handles import synchronize
from horovod_spark.torch._reduce_ops import Sum, allreduce_async


class SyncBatchNorm(_BatchNorm):
    """Like ``torch.nn.BatchNorm{1,2,3}d`` over the union of all ranks' batches while training.

    Mean and variance (and so the running statistics, identical on every rank) come from all
    ranks' samples, and the input gradient accounts for every rank's loss, which makes N ranks
    with batch B behave as one process with batch N*B. In eval mode it is a plain local batch norm
    over the running statistics (without them, ``track_running_stats=False``, it normalizes with
    every rank's batch statistics, as in training and as Horovod's does).
    Every rank must call forward (and backward) the same number of times.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        # Eval mode normalizes with the running statistics, locally; a module without them uses
        # every rank's batch statistics in eval mode too, as Horovod's does.
        if (not self.training and self.track_running_stats) or _basics.size() == 1:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                                self.training or not self.track_running_stats, factor, self.eps)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, self.running_mean,
                                            self.running_var, self.eps, factor)


def _channel_view(t, ndim):
    return t.view((1, -1) + (1,) * (ndim - 2))


class _SyncBatchNormFunction(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        channels = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        # Statistics in float64: the cross-rank combination subtracts nearby quantities.
        xs = x.detach().to(torch.float64)
        local_count = x.numel() // channels
        if local_count > 0:
            local_mean = xs.mean(dims)
            local_m2 = ((xs - _channel_view(local_mean, x.dim())) ** 2).sum(dims)
        else:
            local_mean = local_m2 = xs.new_zeros(channels)
        row = torch.cat([xs.new_tensor([float(local_count)]), local_mean, local_m2]).unsqueeze(0)
        # One allgather of (count, mean, M2) per rank, merged with the parallel-variance formula.
        gathered = synchronize(allgather_async(row, process_set=global_process_set))
        counts = gathered[:, :1]
        means = gathered[:, 1:1 + channels]
        total = float(counts.sum())
        if total <= 1:
            raise ValueError("Expected more than 1 value per channel when training, got input size %s "
                             "on this rank and %d values in total" % (tuple(x.shape), int(total)))
        mean = (counts * means).sum(0) / total
        m2 = gathered[:, 1 + channels:].sum(0) + (counts * (means - mean) ** 2).sum(0)
        var = m2 / total
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
                running_var.mul_(1 - momentum).add_((m2 / (total - 1)).to(running_var.dtype), alpha=momentum)

        compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        xhat = (x.detach().to(compute) - _channel_view(mean.to(compute), x.dim())) * \
            _channel_view(invstd.to(compute), x.dim())
        y = xhat
        if weight is not None:
            y = y * _channel_view(weight.detach().to(compute), x.dim())
        if bias is not None:
            y = y + _channel_view(bias.detach().to(compute), x.dim())
        ctx.save_for_backward(xhat, invstd.to(compute), weight)
        ctx.total = total
        ctx.dims = dims
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        xhat, invstd, weight = ctx.saved_tensors
        ndim = xhat.dim()
        gy = grad_output.to(xhat.dtype)
        sum_dy = gy.sum(ctx.dims)
        sum_dy_xhat = (gy * xhat).sum(ctx.dims)
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            # The normalization couples every sample of every rank: the input gradient needs the
            # global sums of dy and dy*xhat.
            local = torch.cat([sum_dy, sum_dy_xhat]).to(torch.float64)
            summed = synchronize(allreduce_async(local, op=Sum, process_set=global_process_set))
            channels = sum_dy.numel()
            mean_dy = (summed[:channels] / ctx.total).to(gy.dtype)
            mean_dy_xhat = (summed[channels:] / ctx.total).to(gy.dtype)
            scale = invstd if weight is None else invstd * weight.detach().to(gy.dtype)
            grad_input = (gy - _channel_view(mean_dy, ndim) - xhat * _channel_view(mean_dy_xhat, ndim)) * \
                _channel_view(scale, ndim)
            grad_input = grad_input.to(grad_output.dtype)
        # Parameter gradients stay local: DistributedOptimizer averages them like any other.
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = sum_dy_xhat.to(weight.dtype)
        if ctx.needs_input_grad[2]:
            grad_bias = sum_dy.to(grad_output.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None
