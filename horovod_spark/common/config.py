"""Every environment variable horovod_spark reads: name, type, default, meaning, accepted values.

Python code reads a HOROVOD_* variable only through its entry here, e.g.
``config.START_TIMEOUT.get()``, which parses the value the environment holds at that moment
(launchers set many of these in a rank's environment just before it starts, and callers may pass
their own mapping as ``environ``) and raises ``ConfigError`` naming the variable, the bad value and
what it accepts. Code that sets a variable for a rank spells its name ``config.RANK.name``.

The native core reads its own variables once per ``hvd.init()`` (``native/common/config.cc``);
they are listed here too, read by ``CORE``, so that docs/configuration.md, generated from this
list by ``python -m horovod_spark.common.config``, documents every variable in one table. An
empty value counts as unset, for the core and here alike.
"""
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

from horovod_spark.exceptions import ConfigError

PYTHON, CORE, PYTHON_AND_CORE, SCRIPTS = "Python", "core", "Python and core", "scripts/run_tests.sh"


@dataclass(frozen=True)
class Kind:
    """How one type of value is written: ``parse(text)`` returns the value or raises ValueError
    whose text completes "<name>='<text>' ..." (e.g. "is not a number of seconds"); ``accepts``
    completes "set it to ...". ``show`` writes a value the way the docs should."""
    accepts: str
    parse: Callable[[str], Any]
    show: Callable[[Any], str] = str


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("is not %s" % what) from None
    if not math.isfinite(value):
        raise ValueError("is not a finite number")
    return value


def _show_number(value) -> str:
    return "%d" % value if float(value).is_integer() else repr(value)


def seconds(minimum: float, above: bool = False, example: str = "120") -> Kind:
    """Seconds >= ``minimum`` (> when ``above``)."""
    bound = "above %s" % _show_number(minimum) if above else "of at least %s" % _show_number(minimum)

    def parse(text: str) -> float:
        value = _number(text, "a number of seconds")
        if value < minimum or (above and value == minimum):
            raise ValueError("is %s %s" % ("not above" if above else "less than", _show_number(minimum)))
        return value
    return Kind("a number of seconds %s, such as %s" % (bound, example), parse, _show_number)


def whole_number(minimum: int) -> Kind:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError("is not a whole number") from None
        if value < minimum:
            raise ValueError("is less than %d" % minimum)
        return value
    return Kind("a whole number of at least %d" % minimum, parse)


def core_number(minimum: float, unit: str) -> Kind:
    """A number as the core parses it (``strtod``, then checked against ``minimum``)."""
    def parse(text: str) -> float:
        value = _number(text, "a number")
        if value < minimum:
            raise ValueError("is less than %s" % _show_number(minimum))
        return value
    return Kind("a number of %s of at least %s" % (unit, _show_number(minimum)), parse, _show_number)


def _parse_port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError("is not a port number") from None
    if not 1 <= value <= 65535:
        raise ValueError("is not a port number between 1 and 65535")
    return value


PORT = Kind("a TCP port number between 1 and 65535", _parse_port)

# The one flag grammar, for every flag: Python's here and the core's (native/common/config.cc
# env_flag, env_switch) alike. A word outside it is refused, never guessed at.
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_FLAG_WORDS = "1, true, yes or on to turn it on; 0, false, no or off to turn it off"


def _flag_word(text: str) -> Optional[bool]:
    """True or False for a word of the flag grammar (any letter case, spaces around ignored), else None."""
    word = text.strip().lower()
    return True if word in _TRUE else False if word in _FALSE else None


def _parse_flag(text: str) -> bool:
    value = _flag_word(text)
    if value is None:
        raise ValueError("is neither on nor off")
    return value


def _parse_switch(text: str) -> str:
    if text.strip().lower() == "auto":
        return "auto"
    value = _flag_word(text)
    if value is None:
        raise ValueError("is neither auto, on nor off")
    return "on" if value else "off"


FLAG = Kind(_FLAG_WORDS, _parse_flag, lambda value: "on" if value else "off")
# A flag that may also be left to the core to decide: unset or auto.
SWITCH = Kind("auto (or unset) to let the core choose; " + _FLAG_WORDS, _parse_switch)


def choice(*words: str, synonyms: Optional[Mapping[str, str]] = None) -> Kind:
    """One of ``words`` (any letter case); ``synonyms`` maps further accepted words onto them."""
    table = dict(synonyms or {})

    def parse(text: str) -> str:
        word = text.strip().lower()
        word = table.get(word, word)
        if word not in words:
            raise ValueError("is not one of %s" % ", ".join(words))
        return word
    also = " (%s)" % ", ".join("%s means %s" % kv for kv in table.items()) if table else ""
    return Kind("one of %s%s" % (", ".join(words), also), parse)


def text(what: str) -> Kind:
    return Kind(what, lambda value: value)


def _parse_hex(text: str) -> bytes:
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise ValueError("is not hexadecimal digits") from None


HEX_SECRET = Kind("the job's secret as hexadecimal digits (the launcher makes one per job)", _parse_hex,
                  lambda value: value.hex())


def names(example: str) -> Kind:
    def parse(text: str) -> tuple:
        return tuple(n.strip() for n in text.split(",") if n.strip())
    return Kind("comma-separated names, such as %s" % example, parse, ",".join)


@dataclass(frozen=True)
class Variable:
    """One environment variable. ``default`` is the value when it is unset or empty (None: no
    value); ``default_text`` says it for the docs where it is worked out at run time."""
    name: str
    kind: Kind
    default: Any
    meaning: str
    read_by: str = PYTHON
    default_text: str = ""

    def raw(self, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
        """The text the environment holds, or None when it is unset or empty."""
        value = (os.environ if environ is None else environ).get(self.name)
        return value if value else None

    def is_set(self, environ: Optional[Mapping[str, str]] = None) -> bool:
        return self.raw(environ) is not None

    def parse(self, value: str) -> Any:
        """``value`` read as this variable's kind; ConfigError naming the variable otherwise."""
        try:
            return self.kind.parse(value)
        except ValueError as exc:
            has_default = self.default is not None or self.default_text
            unset = ", or unset it (default: %s)" % self.describe_default() if has_default else ""
            raise ConfigError("%s=%r %s; set it to %s%s" % (self.name, value, exc, self.kind.accepts, unset)) from None

    def get(self, environ: Optional[Mapping[str, str]] = None, default: Any = ...) -> Any:
        """The parsed value now in the environment; ``default`` (else the variable's own) when unset."""
        value = self.raw(environ)
        if value is None:
            return self.default if default is ... else default
        return self.parse(value)

    def require(self, environ: Optional[Mapping[str, str]] = None,
                hint: str = "the launcher that starts this process sets it") -> Any:
        """The parsed value, which must be set; ``hint`` completes the error's "X is not set; ..."."""
        value = self.raw(environ)
        if value is None:
            raise ConfigError("%s is not set; %s" % (self.name, hint))
        return self.parse(value)

    def describe_default(self) -> str:
        if self.default_text:
            return self.default_text
        return "unset" if self.default is None else self.kind.show(self.default)


VARIABLES: Dict[str, Variable] = {}


def _define(*args, **kwargs) -> Variable:
    variable = Variable(*args, **kwargs)
    if variable.name in VARIABLES:
        raise RuntimeError("%s is defined twice" % variable.name)
    VARIABLES[variable.name] = variable
    return variable


_SET_BY_LAUNCHERS = " Set by the launchers (horovod-spark-run, run_local, horovod_spark.run) for each rank."

# -- a rank's identity and rendezvous: set by the launchers, read by hvd.init() -------------------
RANK = _define("HOROVOD_RANK", whole_number(0), None, "This process's rank, below HOROVOD_SIZE. Without it (and "
               "outside mpirun) hvd.init() runs a single rank." + _SET_BY_LAUNCHERS)
SIZE = _define("HOROVOD_SIZE", whole_number(1), None, "The number of ranks; needed with HOROVOD_RANK."
               + _SET_BY_LAUNCHERS)
LOCAL_RANK = _define("HOROVOD_LOCAL_RANK", whole_number(0), None, "This rank's index among the ranks on its host.",
                     default_text="from the ranks' HOROVOD_HOSTNAME")
LOCAL_SIZE = _define("HOROVOD_LOCAL_SIZE", whole_number(1), None, "The number of ranks on this rank's host.",
                     default_text="from the ranks' HOROVOD_HOSTNAME")
CROSS_RANK = _define("HOROVOD_CROSS_RANK", whole_number(0), None, "This rank's index among the ranks with its "
                     "local rank on the other hosts.", default_text="from the ranks' HOROVOD_HOSTNAME")
CROSS_SIZE = _define("HOROVOD_CROSS_SIZE", whole_number(1), None, "The number of ranks with this rank's local rank "
                     "(one per host that has it).", default_text="from the ranks' HOROVOD_HOSTNAME")
RENDEZVOUS_ADDR = _define("HOROVOD_RENDEZVOUS_ADDR", text("a host name or IP address"), None,
                          "Where the job's KV service (the rendezvous of hvd.init()) listens." + _SET_BY_LAUNCHERS)
RENDEZVOUS_PORT = _define("HOROVOD_RENDEZVOUS_PORT", PORT, None, "The KV service's port." + _SET_BY_LAUNCHERS)
SECRET_KEY = _define("HOROVOD_SECRET_KEY", HEX_SECRET, None, "The job's secret: whoever connects to the KV service "
                     "or to a rank's peer port proves it knows it (docs/security.md)." + _SET_BY_LAUNCHERS)
RUN_SCOPE = _define("HOROVOD_RUN_SCOPE", text("any text, such as a job id"), "job", "The job's prefix for its KV keys, "
                    "so two jobs on one service never mix." + _SET_BY_LAUNCHERS)
HOSTNAME = _define("HOROVOD_HOSTNAME", text("a host name"), None, "Which host this rank is on: ranks with equal "
                   "values talk through shared memory and share a local rank numbering. On a Spark executor "
                   "(`spark.executorEnv.HOROVOD_HOSTNAME`) it names the executor's host.",
                   default_text="the machine's host name")
ADVERTISE_ADDR = _define("HOROVOD_ADVERTISE_ADDR", text("an IP address or host name the other ranks can reach"),
                         None, "The address this rank's peers connect to, instead of the one picked from "
                         "HOROVOD_GLOO_IFACE or the route to the rendezvous service.",
                         default_text="chosen by HOROVOD_GLOO_IFACE, else the route to the KV service")
GLOO_IFACE = _define("HOROVOD_GLOO_IFACE", names("eth0,eth1"), None, "Network interfaces to reach the other ranks "
                     "over: the rank publishes the IPv4 addresses of those it has, in this order, and each other "
                     "host connects to the first that answers it (horovod_spark.run(nics=...) sets it).",
                     default_text="the interface that routes to the KV service, then the host's other interfaces")
START_TIMEOUT = _define("HOROVOD_START_TIMEOUT", seconds(1), 120.0, "How long hvd.init() waits for every rank to "
                        "arrive and connect (horovod-spark-run --start-timeout, horovod_spark.run's start_timeout "
                        "set it).", read_by=PYTHON_AND_CORE)
CPU_BIND = _define("HOROVOD_CPU_BIND", FLAG, True, "Local jobs (horovod-spark-run, run_local): run each rank on "
                   "its own CPUs, a contiguous share of the launcher's, as Open MPI binds by default: whole cores "
                   "while there are at least as many cores as ranks, else hardware threads; with more ranks than "
                   "CPUs, no binding. A rank then neither migrates nor shares a core with the peer it waits for, "
                   "which is what makes a latency-bound loop's slow tail. OMP_NUM_THREADS defaults to the rank's "
                   "CPUs. Off leaves placement to the OS.")
CPU_OPERATIONS = _define("HOROVOD_CPU_OPERATIONS", choice("mpi", "gloo", synonyms={"tcp": "gloo", "shm": "gloo"}),
                         None, "What carries the data between ranks: mpi (only for ranks started by mpirun or "
                         "hvd.init(comm=...)) or gloo, this project's shared-memory and TCP links.",
                         default_text="mpi under mpirun, else gloo")

ELASTIC = _define("HOROVOD_ELASTIC", FLAG, False, "This rank belongs to an elastic job: hvd.init() asks the job's "
                  "driver for its rank and size (which change when ranks are lost or added) instead of reading "
                  "HOROVOD_RANK. Set by the elastic launchers (run_elastic_local) for each rank.")
ELASTIC_WORKER = _define("HOROVOD_ELASTIC_WORKER", whole_number(0), None, "An elastic rank's worker number: fixed "
                         "for the life of its process, while its rank changes from reset to reset. Set by the "
                         "elastic launchers for each rank.")
ELASTIC_TIMEOUT = _define("HOROVOD_ELASTIC_TIMEOUT", seconds(1), 600.0, "Elastic jobs: how long a reset waits for "
                          "the job to re-form (enough ranks, all of them in hvd.init()) before it fails; "
                          "run_elastic_local's elastic_timeout sets it.")

# -- the core's settings (Horovod's names), read by native/common/config.cc -----------------------
FUSION_THRESHOLD = _define("HOROVOD_FUSION_THRESHOLD", core_number(0, "bytes"), 134217728, "Bytes of allreduces "
                           "fused into one collective.", read_by=CORE)
CYCLE_TIME = _define("HOROVOD_CYCLE_TIME", core_number(0, "milliseconds"), 1, "The engine's longest idle sleep; "
                     "work is negotiated as soon as it arrives.", read_by=CORE)
CACHE_CAPACITY = _define("HOROVOD_CACHE_CAPACITY", core_number(0, "entries"), 1024, "Entries of the response cache "
                         "that lets repeated collectives skip negotiation (0 turns it off).", read_by=CORE)
STALL_CHECK_TIME_SECONDS = _define("HOROVOD_STALL_CHECK_TIME_SECONDS", core_number(0, "seconds"), 60,
                                   "Warn, naming the missing ranks, when a tensor has waited this long for some "
                                   "ranks to submit it (0 turns the check off; horovod-spark-run "
                                   "--stall-check-seconds sets it).", read_by=CORE)
STALL_SHUTDOWN_TIME_SECONDS = _define("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", core_number(0, "seconds"), 0,
                                      "Fail a tensor stalled this long instead of only warning (0: never). On Spark "
                                      "(horovod_spark.run, the estimators' fits) the ranks get it from run()'s env, "
                                      "else the driver's environment, else HOROVOD_SPARK_STALL_SHUTDOWN_TIME_SECONDS.",
                                      read_by=CORE, default_text="0 (never); 600 on Spark")
STALL_CHECK_DISABLE = _define("HOROVOD_STALL_CHECK_DISABLE", FLAG, False, "Turn the stall check off.",
                              read_by=CORE)
PROCESS_SET_TIMEOUT = _define("HOROVOD_PROCESS_SET_TIMEOUT", core_number(1, "seconds"), 120, "How long "
                              "hvd.add_process_set() and hvd.remove_process_set() wait for every rank to make the "
                              "same call before they fail, naming the ranks that did not.", read_by=CORE)
TIMELINE = _define("HOROVOD_TIMELINE", text("a file path"), None, "Write a Chrome trace of every tensor's phases "
                   "to this file (rank 0; horovod-spark-run --timeline-filename sets it).", read_by=CORE,
                   default_text="unset: no timeline")
TIMELINE_MARK_CYCLES = _define("HOROVOD_TIMELINE_MARK_CYCLES", FLAG, False, "Mark the engine's negotiation "
                               "rounds in the timeline (horovod-spark-run --timeline-mark-cycles sets it).",
                               read_by=CORE)
DATA_TIMEOUT_SECONDS = _define("HOROVOD_DATA_TIMEOUT_SECONDS", core_number(1, "seconds"), 600, "A data transfer "
                               "between ranks that makes no progress this long fails the job.", read_by=CORE)
SHM_DISABLE = _define("HOROVOD_SHM_DISABLE", FLAG, False, "Use TCP between ranks on one host instead of "
                      "shared memory.", read_by=CORE)
YIELD_WHEN_IDLE = _define("HOROVOD_YIELD_WHEN_IDLE", FLAG, False, "Ranks waiting for their peers yield the CPU "
                          "at once instead of spinning first, as they do anyway when a host's ranks outnumber its "
                          "CPUs. For ranks that share CPUs with ranks of other hosts (containers or network "
                          "namespaces on one machine), which no rank can see.", read_by=CORE)
SHM_RING_BYTES = _define("HOROVOD_SHM_RING_BYTES", core_number(65536, "bytes"), 4194304, "Size of each "
                         "shared-memory ring between two ranks on one host (rounded down to a multiple of 4096).",
                         read_by=CORE)
SHM_SINGLE_COPY_BYTES = _define("HOROVOD_SHM_SINGLE_COPY_BYTES", core_number(0, "bytes"), 524288, "Messages "
                                "of at least this many bytes between ranks on one host are read straight out of "
                                "the sender's memory (Linux cross-memory attach, process_vm_readv) instead of "
                                "passing through the shared-memory ring: one copy instead of two. Used only where "
                                "a probe at start-up finds it allowed (same user, no ptrace restriction); 0 turns "
                                "it off.", read_by=CORE)
SPECULATIVE_ALLREDUCE = _define("HOROVOD_SPECULATIVE_ALLREDUCE", FLAG, True, "Let small synchronous "
                                "allreduces, broadcasts and allgathers seen before skip negotiation.", read_by=CORE)
_TWO_LEVELS = (" in two levels: within each host over shared memory, then across hosts, then within each host "
               "again. auto chooses it for a job or process set on several hosts that each hold more than one of "
               "its ranks; on (e.g. 1) also where some host holds just one; never on one host or with one rank per "
               "host. Rank 0's value counts for every rank; horovod_spark.common.basics.hierarchical_%s_enabled() "
               "says what was chosen.")
HIERARCHICAL_ALLREDUCE = _define("HOROVOD_HIERARCHICAL_ALLREDUCE", SWITCH, "auto",
                                 "Run allreduce" + _TWO_LEVELS % "allreduce", read_by=CORE)
HIERARCHICAL_ALLGATHER = _define("HOROVOD_HIERARCHICAL_ALLGATHER", SWITCH, "auto",
                                 "Run allgather" + _TWO_LEVELS % "allgather", read_by=CORE)
AUTOTUNE = _define("HOROVOD_AUTOTUNE", FLAG, False, "Tune the fusion threshold and the response cache "
                   "during the job's first cycles: rank 0 tries a small grid, scores each setting by the bytes of "
                   "collectives completed per second and keeps the best for the rest of the job (docs/performance.md; "
                   "horovod_spark.common.basics.autotune_parameters() says what is in force).", read_by=CORE)
AUTOTUNE_LOG = _define("HOROVOD_AUTOTUNE_LOG", text("a file path"), None, "With HOROVOD_AUTOTUNE: rank 0 writes "
                       "one CSV row per trial (its setting and score) and a last row, final, with the choice.",
                       read_by=CORE, default_text="unset: no log")
AUTOTUNE_WARMUP_SAMPLES = _define("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", whole_number(0), 3, "With HOROVOD_AUTOTUNE: "
                                  "samples discarded at the start of the job before the first trial is scored.",
                                  read_by=CORE)
AUTOTUNE_STEPS_PER_SAMPLE = _define("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", whole_number(1), 10, "With "
                                    "HOROVOD_AUTOTUNE: the fewest engine cycles (coordinator passes that ran "
                                    "collectives) in one sample; a sample also lasts at least 0.1 s.", read_by=CORE)

# -- collectives on CUDA tensors (horovod_spark.common.nccl) --------------------------------------------
GPU_CHOICE = choice("nccl", "host", "auto", synonyms={"mpi": "host", "gloo": "host"})
_GPU_OPS = ("How collectives on CUDA tensors run: nccl on the GPU through NVIDIA's NCCL (an error names what is "
            "missing where it cannot), host staged through host memory to the CPU core (mpi and gloo, Horovod's "
            "CPU data planes, mean the same), auto (or unset) NCCL where every rank of the process set can run it "
            "on a GPU of its own, host otherwise. Set it alike on every rank.")
GPU_OPERATIONS = _define("HOROVOD_GPU_OPERATIONS", GPU_CHOICE, "auto", _GPU_OPS)
_GPU_ONE_OP = "Overrides HOROVOD_GPU_OPERATIONS for %s on CUDA tensors; the same values."
GPU_ALLREDUCE = _define("HOROVOD_GPU_ALLREDUCE", GPU_CHOICE, None, _GPU_ONE_OP % "allreduce")
GPU_ALLGATHER = _define("HOROVOD_GPU_ALLGATHER", GPU_CHOICE, None, _GPU_ONE_OP % "allgather")
GPU_BROADCAST = _define("HOROVOD_GPU_BROADCAST", GPU_CHOICE, None, _GPU_ONE_OP % "broadcast")
GPU_ALLTOALL = _define("HOROVOD_GPU_ALLTOALL", GPU_CHOICE, None, _GPU_ONE_OP % "alltoall")
GPU_REDUCESCATTER = _define("HOROVOD_GPU_REDUCESCATTER", GPU_CHOICE, None, _GPU_ONE_OP % "reducescatter")
NCCL_LIBRARY = _define("HOROVOD_SPARK_NCCL_LIBRARY", text("the path of libnccl.so.2"), None,
                       "The NCCL library to load when this process has none loaded yet (a CUDA build of torch "
                       "loads its own, which is then used); tried before the nvidia-nccl-cu12 package's and the "
                       "system's.")

# -- horovod_spark.run on the Spark driver ---------------------------------------------------------
SPARK_START_TIMEOUT = _define("HOROVOD_SPARK_START_TIMEOUT", seconds(0, above=True, example="600"), 600.0,
                              "horovod_spark.run's start_timeout when the argument is not given: how long every "
                              "rank's task may take to start and register.")
SPARK_ELASTIC_HEARTBEAT_TIMEOUT = _define(
    "HOROVOD_SPARK_ELASTIC_HEARTBEAT_TIMEOUT_SECONDS", seconds(1, above=True, example="10"), 4.0,
    "horovod_spark.run_elastic: how long a rank's task may be silent (it sends a heartbeat every second) before "
    "the driver counts the rank as lost and the others re-form the job. Longer rides out executors that pause "
    "(long garbage collections, overloaded hosts); shorter notices a lost executor sooner.")
SPARK_DRIVER_HOST = _define("HOROVOD_SPARK_DRIVER_HOST", text("a host name or IP address"), None,
                            "The address executors use to reach the driver's service.",
                            default_text="spark.driver.host")
SPARK_HOST_KEY = _define("HOROVOD_SPARK_HOST_KEY", choice("hostname", "executor"), "hostname", "What makes ranks "
                         "local to each other: their host's name, or (executor) each executor is its own host.")
SPARK_SLOT_WAIT = _define("HOROVOD_SPARK_SLOT_WAIT", seconds(0, example="10"), 10.0, "How long the pre-flight "
                          "check waits for executors still registering (clusters only).")
SPARK_USE_MPI = _define("HOROVOD_SPARK_USE_MPI", FLAG, False, "MPI mode (mpirun through the Spark tasks) when "
                        "horovod_spark.run's use_mpi is not given.")
SPARK_MPIRUN = _define("HOROVOD_SPARK_MPIRUN", text("the path of Open MPI's mpirun"), None, "The mpirun of MPI "
                       "mode.", default_text="mpirun on PATH")
SPARK_STALL_SHUTDOWN_TIME = _define("HOROVOD_SPARK_STALL_SHUTDOWN_TIME_SECONDS", seconds(0, example="600"), 600.0,
                                    "The HOROVOD_STALL_SHUTDOWN_TIME_SECONDS that horovod_spark.run and the "
                                    "estimators' fits give their ranks when the driver's environment and run()'s "
                                    "env set none: a collective some rank never joins fails the run after this "
                                    "long instead of holding the cluster's task slots forever (0: never).")
SPARK_MAX_RESULT_BYTES = _define("HOROVOD_SPARK_MAX_RESULT_BYTES", whole_number(1), 4 * 1024 ** 3,
                                 "The largest pickled return value one rank of horovod_spark.run may send back; "
                                 "results stream to a private spool file on the driver, never through the "
                                 "driver JVM. A larger one fails the run naming its size.")

# -- the security of the job's services and peer ports (docs/security.md) ---------------------------
BIND_ANY = _define("HOROVOD_SPARK_BIND_ANY", FLAG, False, "Let the job's services (the KV service, horovod_spark.run's "
                   "driver service) and the ranks' peer ports listen on every interface (0.0.0.0) instead of only "
                   "the address the job uses.")
SPARK_TLS = _define("HOROVOD_SPARK_TLS", FLAG, False, "Wrap every connection to the job's Python services (the KV "
                    "service, horovod_spark.run's driver service) in TLS. The launchers pass it on to the ranks.")
DATA_PLANE_AUTH = _define("HOROVOD_SPARK_DATA_PLANE_AUTH", FLAG, False, "Authenticate every message between ranks "
                          "over TCP: each frame of at most 64 KiB carries a Poly1305 tag keyed per job, link and "
                          "direction, and a tampered, dropped, replayed or reordered frame fails the collective on "
                          "every rank, naming the link. Shared-memory links need none. Every rank must have the "
                          "same value (hvd.init() fails naming this setting otherwise); the launchers pass the "
                          "driver's value on to the ranks.", read_by=PYTHON_AND_CORE,
                          default_text="on when HOROVOD_SPARK_TLS is on, else off")
SPARK_TLS_CERT = _define("HOROVOD_SPARK_TLS_CERT", text("the path of a PEM certificate"), None, "With "
                         "HOROVOD_SPARK_TLS: the services' certificate (with HOROVOD_SPARK_TLS_KEY).",
                         default_text="a self-signed certificate made per job with openssl")
SPARK_TLS_KEY = _define("HOROVOD_SPARK_TLS_KEY", text("the path of a PEM private key"), None, "With "
                        "HOROVOD_SPARK_TLS: the private key of HOROVOD_SPARK_TLS_CERT.",
                        default_text="made with the per-job certificate")

# -- between horovod_spark.run's own processes: set by it, read by what it starts ------------------
SPARK_GPUS = _define("HOROVOD_SPARK_GPUS", names("0,1"), (), "The GPU addresses Spark gave this rank's task "
                     "(horovod_spark.spark.get_available_devices()). Set by horovod_spark.run.",
                     default_text="unset: no GPUs assigned")
CUDA_VISIBLE_DEVICES = _define("CUDA_VISIBLE_DEVICES", names("0,1"), None, "CUDA's own: the GPUs this process "
                               "may use, renumbered from 0. Set by horovod_spark.run to the GPUs Spark gave the "
                               "rank's task; read by the estimators to choose the rank's GPU.",
                               default_text="unset: every GPU visible")
SPARK_WORKDIR = _define("HOROVOD_SPARK_WORKDIR", text("a directory"), None, "The rank process's directory for "
                        "its function and result. Set by horovod_spark.run's tasks.")
SPARK_PARENT_PID = _define("HOROVOD_SPARK_PARENT_PID", whole_number(1), None, "The process id of the Spark task "
                           "whose death ends the rank process. Set by horovod_spark.run's tasks.")
SPARK_EXPECTED_RANK = _define("HOROVOD_SPARK_EXPECTED_RANK", whole_number(0), None, "MPI mode: the rank mpirun "
                              "must place in this task. Set by horovod_spark.run's tasks.")
SPARK_EXPECTED_SIZE = _define("HOROVOD_SPARK_EXPECTED_SIZE", whole_number(1), None, "MPI mode: the number of ranks "
                              "mpirun must start. Set by horovod_spark.run's tasks.")
SPARK_AGENT_ADDR = _define("HOROVOD_SPARK_AGENT_ADDR", text("a host name or IP address"), None, "MPI mode: the "
                           "driver service mpirun's agent asks to start daemons. Set by horovod_spark.run for "
                           "mpirun.")
SPARK_AGENT_PORT = _define("HOROVOD_SPARK_AGENT_PORT", PORT, None, "MPI mode: that service's port. Set by "
                           "horovod_spark.run for mpirun.")
SPARK_AGENT_KEY = _define("HOROVOD_SPARK_AGENT_KEY", HEX_SECRET, None, "MPI mode: that service's secret. Set by "
                          "horovod_spark.run for mpirun.")

# -- the test script -------------------------------------------------------------------------------
SPARK_SKIP_LEGACY = _define("HOROVOD_SPARK_SKIP_LEGACY", FLAG, False,
                            "Skip the second test run, on the older stack (`.venv-legacy`).", read_by=SCRIPTS,
                            default_text="off: both runs")
SPARK_SKIP_SANITIZERS = _define("HOROVOD_SPARK_SKIP_SANITIZERS", FLAG, False, "Skip the sanitizer runs of the "
                                "native core (`scripts/run_sanitizers.sh`) at the end of the test command.",
                                read_by=SCRIPTS,
                                default_text="off: they run")
SPARK_LEGACY_PYTHON = _define("HOROVOD_SPARK_LEGACY_PYTHON", text("the path of a Python interpreter"), None,
                              "The Python of `.venv-legacy`, which runs the older-stack tests. Set by "
                              "`scripts/venv_legacy.sh`.", read_by=SCRIPTS)


def check_assignments(env: Mapping[str, str], source: str) -> None:
    """ConfigError for the first value in ``env`` (variables given to ranks, e.g. ``env=``) that its
    variable does not accept, prefixed with ``source``: said once, before any rank starts."""
    for name, value in env.items():
        if value and name in VARIABLES:
            try:
                VARIABLES[name].parse(value)
            except ConfigError as exc:
                raise ConfigError("%s: %s" % (source, exc)) from None


def table_rows() -> List[str]:
    """docs/configuration.md's table, one line per variable, variable names in backticks."""
    def code(words: str) -> str:
        return re.sub(r"(?<![.`\w])(HOROVOD_[A-Z0-9_]+)\b", r"`\1`", words)
    lines = ["| variable | read by | accepts | default | meaning |", "| --- | --- | --- | --- | --- |"]
    for v in VARIABLES.values():
        lines.append("| `%s` | %s | %s | %s | %s |" % (v.name, v.read_by, code(v.kind.accepts),
                                                      code(v.describe_default()), code(v.meaning)))
    return lines


if __name__ == "__main__":
    print("\n".join(table_rows()))

