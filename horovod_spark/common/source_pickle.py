"""cloudpickle for code that runs in another process, carrying the source of the code that travels by value.

cloudpickle sends a function by value when its module cannot be imported on the other side: one
defined in ``__main__``, in a notebook cell, or in a module registered with
``cloudpickle.register_pickle_by_value``. Its code object is rebuilt there, and a traceback raised
in it needs two things the receiving process lacks: the file name (cloudpickle >= 3.1 replaces
``co_filename`` with ``"<dynamic-code>"``) and that file's lines (a notebook cell exists only in
the kernel's ``linecache``; a driver's script or test file may be absent, or another version, on
an executor).

``dumps`` pickles every code object as cloudpickle's own reduction followed by ``_restore_code``,
which gives the rebuilt code the driver's file name back (through ``code.replace``, whatever name
cloudpickle left) and registers the driver's lines for that file in the receiving process's
``linecache``, so tracebacks and ``inspect.getsource`` show the user's code there. Only the files
whose code travels are sent, each file's text once per payload. Plain ``cloudpickle.loads`` reads
the payload; the receiving side needs horovod_spark importable, as it has where ranks run.
"""
import io
import linecache
import types
from typing import Any, Dict, Optional

import cloudpickle

# A file this large travels without its text: only its name is restored. Source files of
# functions sent by value are far smaller; the cap keeps a pathological one out of the payload.
_MAX_SOURCE_CHARS = 4 * 1024 * 1024

# filename -> the text last registered for it here: one payload's code objects share one text
# object (the pickle memo sends it once), so the file is split into lines once per payload.
_registered: Dict[str, str] = {}


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, with the file names and source lines of by-value code."""
    buffer = io.BytesIO()
    _SourcePickler(buffer).dump(obj)
    return buffer.getvalue()


class _SourcePickler(cloudpickle.Pickler):
    def __init__(self, file):
        super().__init__(file)
        self._texts: Dict[str, Optional[str]] = {}

    def reducer_override(self, obj):
        # The pickler asks here about every object; only code objects of functions that travel by
        # value reach it as CodeType (functions pickled by reference never pickle their code).
        if type(obj) is not types.CodeType:
            return super().reducer_override(obj)
        reduction = self._cloudpickle_reduction(obj)
        if reduction is None:  # a cloudpickle that reduces code some other way: leave it be
            return super().reducer_override(obj)
        make, args = reduction
        return _restore_code, (make, args, obj.co_filename, self._text(obj.co_filename))

    def _cloudpickle_reduction(self, code):
        reduction = super().reducer_override(code)
        if reduction is NotImplemented:
            reduce = self.dispatch_table.get(types.CodeType)
            reduction = reduce(code) if reduce is not None else None
        if isinstance(reduction, tuple) and len(reduction) == 2:
            return reduction
        return None

    def _text(self, filename: str) -> Optional[str]:
        if filename not in self._texts:
            # linecache knows a notebook cell's source (IPython registers it there), and reads a
            # script or module from disk.
            text = "".join(linecache.getlines(filename))
            self._texts[filename] = text if 0 < len(text) <= _MAX_SOURCE_CHARS else None
        return self._texts[filename]


def _restore_code(make, args, filename: str, text: Optional[str]) -> types.CodeType:
    """Unpickling side: rebuild the code as cloudpickle would, then restore its driver-side identity.
    Code nested in it (inner functions, lambdas, comprehensions) came through here already."""
    code = make(*args)
    if text is not None:
        _remember_source(filename, text)
    if code.co_filename != filename:
        code = code.replace(co_filename=filename)
    return code


def _remember_source(filename: str, text: str) -> None:
    if _registered.get(filename) is text:
        return
    # mtime None marks the entry as not backed by a file, so linecache.checkcache (which every
    # traceback runs) keeps it even where a file of that name exists here with other content:
    # the code that travelled is the driver's, and these are its lines.
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    _registered[filename] = text
