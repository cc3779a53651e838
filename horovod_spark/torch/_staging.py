"""Host staging: how a collective's tensors reach the CPU core and how its results come back.

The native core reads and writes host memory only. Every collective of ``horovod_spark.torch``
goes through one ``Stage``:

    stage = begin(device)             # from the first input tensor's device
    src = stage.host(tensor)          # what the core reads
    out = stage.host_empty(src)       # what the core writes (ops with a preallocated output)
    handle = stage.submit(enqueue)    # enqueue() calls the core with src/out's pointers
    ...                               # at synchronize, once the core is done:
    result = stage.to_device(out)     # a tensor on the caller's device
    stage.copy_into(tensor, out)      # in-place ops: the result written into the caller's tensor

On a CPU tensor every step is the identity (``host`` returns the tensor itself when contiguous,
``submit`` enqueues at once): the CPU path is this same code with nothing to copy. On a CUDA
tensor ``host`` copies into pinned host memory on a side stream that first waits for the caller's
current stream (so the copy reads the finished values), ``submit`` hands ``enqueue`` to one
staging thread that waits for those copies before it calls the core (so the caller, e.g. a
gradient hook in the middle of backward, never waits for the GPU), and ``to_device`` /
``copy_into`` copy back on the side stream and wait for that copy: when ``synchronize`` returns
the result is on the device.

Names are drawn on the calling thread before ``submit``, so ranks name their collectives in
program order even though the staging thread enqueues them later; the core matches them by name.
"""
import concurrent.futures
import contextlib
import threading
import time

import torch

# Waiting for the staging thread means waiting for the GPU to finish the work queued before the
# collective was called, plus a device-to-host copy: minutes only when the device is hung.
READY_TIMEOUT_S = 600.0

_worker_lock = threading.Lock()
_worker = None


def _staging_worker():
    """The one thread that enqueues staged collectives, in the order they were submitted."""
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="hs-staging")
        return _worker


class Deferred:
    """Core handles that exist once the staging thread has enqueued the collective."""

    __slots__ = ("_future",)

    def __init__(self, future):
        self._future = future

    def ready(self):
        """True once the collective has been handed to the core (or failed to be)."""
        return self._future.done()

    def core_handles(self, timeout=READY_TIMEOUT_S):
        """The core handles; raises what ``enqueue`` raised, or TimeoutError past ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                # Short slices, so Ctrl-C reaches the waiting thread.
                return self._future.result(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
            except concurrent.futures.TimeoutError:
                if time.monotonic() >= deadline:
                    raise TimeoutError("a device tensor's copy to host memory did not finish within %.0f s, so its "
                                       "collective was never started; the GPU is hung or still running a very long "
                                       "kernel queued before the collective" % timeout) from None


def _enqueue_when_ready(marker, enqueue):
    marker.synchronize()
    handles = enqueue()
    return [handles] if isinstance(handles, int) else list(handles)


class _DoneMarker:
    """The readiness marker of host memory: nothing to wait for."""

    def synchronize(self):
        return None


class Stage:
    """Staging of one collective whose tensors live on ``device`` (the CPU here: identity).

    ``deferred=True`` routes ``submit`` through the staging thread even for CPU tensors, as the
    CUDA stage always does; tests use it to run that machinery without a GPU.
    """

    def __init__(self, device=None, deferred=False):
        self.device = torch.device("cpu") if device is None else device
        self.deferred = deferred

    def host(self, tensor):
        """The host tensor the core reads for ``tensor``: contiguous, with ``tensor``'s values."""
        return tensor if tensor.is_contiguous() else tensor.contiguous()

    def host_empty(self, like):
        """A host tensor of ``like``'s shape and dtype for the core to write."""
        return torch.empty(like.shape, dtype=like.dtype)

    def _ready_marker(self):
        return _DoneMarker()

    def submit(self, enqueue):
        """Run ``enqueue()`` (which returns core handle(s)) once the inputs are in host memory.

        Returns its result directly when nothing has to be waited for, else a ``Deferred``."""
        if not self.deferred:
            return enqueue()
        return Deferred(_staging_worker().submit(_enqueue_when_ready, self._ready_marker(), enqueue))

    def to_device(self, host_tensor):
        """``host_tensor`` (a finished result) as a tensor on this stage's device."""
        return host_tensor

    def copy_into(self, target, host_tensor):
        """Write a finished result into the caller's ``target`` tensor (in-place ops)."""
        if target is not host_tensor:
            with torch.no_grad():
                target.copy_(host_tensor)


class CudaStage(Stage):
    """Staging through pinned host memory and a side stream of ``device``."""

    def __init__(self, device):
        super().__init__(device, deferred=True)
        self._stream = _side_stream(device)

    def host(self, tensor):
        src = tensor if tensor.is_contiguous() else tensor.contiguous()
        pinned = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
        # The copy must see every kernel the caller queued before calling the collective.
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.no_grad(), torch.cuda.stream(self._stream):
            pinned.copy_(src, non_blocking=True)
        # The caching allocator must not hand src's memory out again before the copy read it.
        src.record_stream(self._stream)
        return pinned

    def host_empty(self, like):
        return torch.empty(like.shape, dtype=like.dtype, pin_memory=True)

    def _ready_marker(self):
        event = torch.cuda.Event()
        event.record(self._stream)
        return event

    def _copy_back(self, target, host_tensor):
        # Kernels already queued on the caller's stream may still read or write target.
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.no_grad(), torch.cuda.stream(self._stream):
            target.copy_(host_tensor, non_blocking=host_tensor.is_pinned())
        target.record_stream(self._stream)
        done = torch.cuda.Event()
        done.record(self._stream)
        done.synchronize()
        return target

    def to_device(self, host_tensor):
        target = torch.empty(host_tensor.shape, dtype=host_tensor.dtype, device=self.device)
        return self._copy_back(target, host_tensor)

    def copy_into(self, target, host_tensor):
        self._copy_back(target, host_tensor)


_streams = {}
_streams_lock = threading.Lock()


def _side_stream(device):
    with _streams_lock:
        stream = _streams.get(device.index)
        if stream is None:
            stream = _streams[device.index] = torch.cuda.Stream(device=device)
        return stream


_CPU_STAGE = Stage()
_DEFERRED_CPU_STAGE = Stage(deferred=True)
# True inside cpu_through_staging_thread(): CPU collectives then skip their direct paths. A module
# attribute rather than a function, because the latency path of every CPU collective reads it.
cpu_on_staging_thread = False


@contextlib.contextmanager
def cpu_through_staging_thread():
    """Inside, collectives on CPU tensors are enqueued by the staging thread as CUDA ones are, so
    that machinery (ordering, deferred handles, errors at ``synchronize``) runs without a GPU.
    For tests and diagnosis; it costs a thread hop per collective."""
    global cpu_on_staging_thread
    previous, cpu_on_staging_thread = cpu_on_staging_thread, True
    try:
        yield
    finally:
        cpu_on_staging_thread = previous


def begin(device):
    """The ``Stage`` for a collective on tensors of ``device`` (already checked by _buffers)."""
    if device.type == "cpu":
        return _DEFERRED_CPU_STAGE if cpu_on_staging_thread else _CPU_STAGE
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return CudaStage(device)


def available():
    """True when this process can stage CUDA tensors: torch with CUDA and a visible device."""
    return torch.cuda.is_available()
