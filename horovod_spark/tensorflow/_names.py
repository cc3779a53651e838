"""Names that match the same collective across ranks.

The core pairs requests by name, so every rank must generate the same name for the same op.
Eagerly, ranks run unnamed ops in the same program order, so a per-op-type counter (Horovod's
``allreduce.noname.<n>``) matches. Inside ``tf.function`` names are fixed when the function is
traced, and ranks may trace a different number of times (retracing on a different last-batch
shape, say), so there the counter is local to the graph being traced: the same Python code
yields the same names in every trace on every rank.
"""
import collections
import itertools
import re
import threading
import weakref

import tensorflow as tf

_lock = threading.Lock()
_eager_counters = collections.defaultdict(itertools.count)
_graph_counters = weakref.WeakKeyDictionary()
_TRACE_SUFFIX = re.compile(r"_\d+$")


def reset():
    """Forget eager counters (init/shutdown: a fresh core must see names from 0 on every rank)."""
    with _lock:
        _eager_counters.clear()


def _graph_key(graph):
    # FuncGraph names carry a process-wide uid suffix ("__inference_step_123") that differs
    # between ranks; only the stem is meaningful across processes.
    return _TRACE_SUFFIX.sub("", getattr(graph, "name", "") or "graph")


def op_name(op_type, name=None, ignore_name_scope=True):
    """The core-level name for a ``op_type`` collective called ``name`` (None: generated)."""
    if name is not None:
        if not ignore_name_scope:
            scope = tf.get_current_name_scope()
            if scope:
                name = scope + "/" + name
        return "%s.%s" % (op_type, name)
    if tf.executing_eagerly():
        with _lock:
            n = next(_eager_counters[op_type])
        return "%s.noname.%d" % (op_type, n)
    graph = tf.compat.v1.get_default_graph()
    with _lock:
        counters = _graph_counters.setdefault(graph, collections.defaultdict(itertools.count))
        n = next(counters[op_type])
    return "%s.noname.%s.%d" % (op_type, _graph_key(graph), n)
