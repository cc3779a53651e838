"""Lifecycle and topology of the native core: init, shutdown, rank/size queries, capabilities.

Function for function with Horovod's ``horovod.common.basics`` as re-exported by ``horovod.torch``.
"""
import atexit
import os
import threading

from horovod_spark.common import _core, gpu_support, peer_addresses, rendezvous
from horovod_spark.common import config as env_config  # basics.config() is the core's settings
from horovod_spark.common.process_sets import ProcessSet, add_process_set, clear_registrations
from horovod_spark.exceptions import ConfigError, HorovodInternalError, TransportError

_lock = threading.RLock()
# generation: how many times this process formed a job (the KV scope of each rendezvous); in an
# elastic job the driver numbers the generations instead (elastic_generation, 0 before the first).
_state = {"topology": None, "generation": 0, "mpi": False, "comm": None, "elastic_generation": 0,
          "last_rank": None}


def init(comm=None, process_sets=None):
    """Start this rank's collective engine and connect it to every other rank.

    ``comm``: an mpi4py communicator whose ranks form the job (each sub-communicator trains on its
    own); by default (None or ``[]``) the rank comes from the launcher's environment, from
    ``mpirun``, or is a single rank. ``process_sets``: ``ProcessSet`` objects (or rank lists) to
    register once connected; ``"dynamic"``, Horovod's switch for sets added later with
    ``hvd.add_process_set``, is accepted and changes nothing: sets can always be added later here.
    """
    process_sets = _initial_process_sets(process_sets)
    with _lock:
        if _core.is_created():
            return
        while True:
            try:
                _connect(comm)
                break
            except (HorovodInternalError, TransportError, ConnectionError):
                if not _elastic_membership_changed(comm):
                    raise
                # A peer was lost while this job formed: form the driver's newer one instead.
    for ps in process_sets:
        add_process_set(ps)


def _elastic_membership_changed(comm) -> bool:
    if not env_config.ELASTIC.get() or comm is not None:
        return False
    from horovod_spark.common import elastic_rendezvous
    return elastic_rendezvous.newest_generation() > _state["elastic_generation"]


def elastic_generation() -> int:
    """In an elastic job, the driver's number of the job this rank last formed or tried to form
    (0 before the first); a newer one published by the driver means the membership changed."""
    return _state["elastic_generation"]


def _connect(comm):
    """One attempt of init(): rendezvous with the job's other ranks and connect the core to them."""
    timeout = env_config.START_TIMEOUT.get()
    generation, superseded = _state["generation"], None
    if env_config.ELASTIC.get() and comm is None:
        from horovod_spark.common import elastic_rendezvous
        timeout = max(timeout, env_config.ELASTIC_TIMEOUT.get())
        generation, rank, size = elastic_rendezvous.assignment(_state["elastic_generation"], timeout)
        ident = rendezvous.Identity(rank, size, "elastic")
        superseded = elastic_rendezvous.superseded_check(generation)
    else:
        ident = rendezvous.identity_from(comm)
    reachable_at = peer_addresses.candidates()
    address = reachable_at[0][0]
    # The peer port listens only where the other ranks are told to connect, unless asked. With
    # several published addresses it must listen on all: a peer's probe takes a refused
    # connection as an answer, so a port bound to one of them would make that choice wrong.
    bind_any = env_config.BIND_ANY.get() or len(reachable_at) > 1
    port = _core.create(ident.rank, ident.size, "" if bind_any else address)
    try:
        mine = rendezvous.PeerRecord(ident.rank, address, port, rendezvous.host_id(),
                                     [list(c) for c in reachable_at])
        records, token = rendezvous.exchange_records(ident, mine, generation, timeout,
                                                     superseded=superseded)
        records = peer_addresses.choose(records, ident.rank, timeout)
        mpi_handle = 0
        if _wants_mpi_data_plane(ident):
            from mpi4py import MPI
            # A private duplicate: our messages can never match the user's own mpi4py calls.
            _state["mpi_dup"] = ident.comm.Dup()
            mpi_handle = MPI._handleof(_state["mpi_dup"])
        _core.start([(r.host, r.port, r.host_id) for r in records], token, mpi_handle)
    except BaseException:
        _core.shutdown()
        if ident.source == "elastic":
            _state["elastic_generation"] = generation  # the next attempt asks for a newer one
        raise
    if ident.source == "elastic":
        _state["elastic_generation"] = generation
    else:
        _state["generation"] += 1
    local_rank, local_size, cross_rank, cross_size = rendezvous.placement(records, ident.rank)
    if ident.source == "env":  # a launcher that knows the real placement may say so
        local_rank = env_config.LOCAL_RANK.get(default=local_rank)
        local_size = env_config.LOCAL_SIZE.get(default=local_size)
        cross_rank = env_config.CROSS_RANK.get(default=cross_rank)
        cross_size = env_config.CROSS_SIZE.get(default=cross_size)
    _state["topology"] = (ident.rank, ident.size, local_rank, local_size, cross_rank, cross_size)
    _state["last_rank"] = ident.rank
    _state["mpi"] = ident.source == "mpi"
    _state["comm"] = ident.comm


def _initial_process_sets(process_sets):
    """init()'s ``process_sets`` as a list, checked before anything starts."""
    if process_sets is None or (isinstance(process_sets, str) and process_sets.lower() == "dynamic"):
        return []
    if isinstance(process_sets, (str, bytes)) or not hasattr(process_sets, "__iter__"):
        raise ValueError("hvd.init(process_sets=%r): pass a list of ProcessSet objects (or of rank lists), "
                         "or 'dynamic'" % (process_sets,))
    return [ps if isinstance(ps, ProcessSet) else ProcessSet(ps) for ps in process_sets]


def _wants_mpi_data_plane(ident) -> bool:
    """MPI carries the data when ranks came from MPI, unless HOROVOD_CPU_OPERATIONS (Horovod's
    variable) asks for our own shared-memory/TCP links."""
    choice = env_config.CPU_OPERATIONS.get()
    if choice == "mpi" and ident.source != "mpi":
        raise ConfigError("%s=mpi needs ranks started by mpirun or hvd.init(comm=<mpi4py communicator>); "
                          "unset it or set it to gloo" % env_config.CPU_OPERATIONS.name)
    return choice != "gloo" and ident.source == "mpi"


def shutdown():
    """Stop the engine; pending collectives fail with HorovodInternalError. Safe to call twice."""
    with _lock:
        _core.shutdown()
        _state["topology"] = None
        dup = _state.pop("mpi_dup", None)
        if dup is not None:
            try:
                dup.Free()
            except Exception:  # MPI may already be finalized at interpreter exit
                pass
        clear_registrations()


atexit.register(shutdown)


def is_initialized() -> bool:
    return _core.is_created()


def _topology():
    topo = _state["topology"]
    if topo is None:
        raise ValueError("horovod_spark has not been initialized; call hvd.init() first")
    return topo


def rank() -> int:
    return _topology()[0]


def size() -> int:
    return _topology()[1]


def local_rank() -> int:
    return _topology()[2]


def local_size() -> int:
    return _topology()[3]


def cross_rank() -> int:
    return _topology()[4]


def cross_size() -> int:
    return _topology()[5]


def is_homogeneous() -> bool:
    return size() % local_size() == 0


def mpi_enabled() -> bool:
    """True when collectives run over MPI (ranks from ``mpirun`` or ``init(comm=...)``)."""
    return bool(_state["mpi"]) and _core.is_created() and _core.uses_mpi()


def mpi_built() -> bool:
    try:
        import mpi4py  # noqa: F401
        return True
    except ImportError:
        return False


def mpi_threads_supported() -> bool:
    """Whether MPI was initialised with MPI_THREAD_MULTIPLE (needed to mix our collectives and
    mpi4py calls from several threads)."""
    if not mpi_enabled():
        raise ValueError("mpi_threads_supported() is only meaningful when horovod_spark was "
                         "initialised under MPI (mpirun or hvd.init(comm=...))")
    from mpi4py import MPI
    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


def gloo_enabled() -> bool:
    """Our own TCP/shared-memory transport plays the part of Horovod's Gloo controller."""
    return is_initialized()


def gloo_built() -> bool:
    return True


def nccl_built() -> bool:
    """Whether collectives on device memory run over NCCL (False: see common/gpu_support.py)."""
    return gpu_support.nccl_built()


def cuda_built() -> bool:
    """Whether collectives accept CUDA tensors of an installed framework (host staging); see
    common/gpu_support.py. The framework modules answer for their own framework."""
    return gpu_support.cuda_built()


def gpu_available() -> bool:
    """``cuda_built()`` and this process sees a CUDA device."""
    return gpu_support.gpu_available()


def rocm_built() -> bool:
    return False


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def cpu_placement() -> dict:
    """The CPUs this host's ranks may run on between them (``local_cpus``, the union of their
    affinity masks, which the core learns at set-up) and whether the ranks share CPUs (``shared``)."""
    return dict(_core.cpu_placement())


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Start writing a Chrome-trace timeline (rank 0 writes it, as in Horovod)."""
    if not is_initialized():
        raise ValueError("call hvd.init() before start_timeline()")
    if rank() == 0:
        _core.start_timeline(os.path.abspath(file_path), bool(mark_cycles))


def stop_timeline() -> None:
    if is_initialized() and rank() == 0:
        _core.stop_timeline()


def _process_set_id(process_set) -> int:
    if process_set is None:
        return 0
    return process_set if isinstance(process_set, int) else process_set._require_id()


def hierarchical_allreduce_enabled(process_set=None) -> bool:
    """Whether allreduce in ``process_set`` (a ProcessSet or its id; default: every rank) runs in two
    levels, within hosts and across them (``HOROVOD_HIERARCHICAL_ALLREDUCE`` and the placement
    decide; docs/configuration.md). False on a rank outside the set."""
    if not is_initialized():
        raise ValueError("call hvd.init() before hierarchical_allreduce_enabled()")
    return bool(_core.hierarchical(_process_set_id(process_set))["allreduce"])


def hierarchical_allgather_enabled(process_set=None) -> bool:
    """As hierarchical_allreduce_enabled(), for allgather (``HOROVOD_HIERARCHICAL_ALLGATHER``)."""
    if not is_initialized():
        raise ValueError("call hvd.init() before hierarchical_allgather_enabled()")
    return bool(_core.hierarchical(_process_set_id(process_set))["allgather"])


def config() -> dict:
    """The core's settings as read from the environment (HOROVOD_FUSION_THRESHOLD, ...)."""
    return _core.config()


def autotune_parameters() -> dict:
    """Autotune's setting on this rank (``HOROVOD_AUTOTUNE``; docs/performance.md): ``fusion_threshold``
    (bytes) and ``response_cache`` (bool) in force, ``searching`` (False once they are the final
    choice, the same on every rank), ``trials`` finished so far and ``enabled``. Without autotune,
    this rank's environment's settings with ``searching`` False (rank 0's are the ones in force:
    its coordinator fuses for every rank)."""
    if not is_initialized():
        raise ValueError("call hvd.init() before autotune_parameters()")
    return dict(_core.autotune())
