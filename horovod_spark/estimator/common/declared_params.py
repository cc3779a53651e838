"""Spark ML Params declared once, with their defaults, from which a stage class gets its keywords.

``declare_param(name, doc, converter, default)`` declares a Param as a class attribute. Every
subclass of ``KeywordParams`` then gets, from the Params it declares and inherits:

- ``__init__(*, <each Param>=<its default>)`` and ``setParams(*, <each Param>=None)``, keyword-only
  under pyspark's ``keyword_only`` (``_input_kwargs`` holds the keywords of the last call), with
  the real keywords in ``inspect.signature`` and ``help()``. A keyword given as None leaves its
  Param as it is; a keyword that names no Param is refused (``refuse_keywords``);
- ``getX()`` / ``setX(value)`` for each Param it declares itself, unless it defines them.

Param names are the keywords (``num_proc``, not ``numProc``), so that ``Estimator(num_proc=2)``,
``getOrDefault("num_proc")`` and saved metadata agree. A class that defines ``__init__`` or
``setParams`` in its own body keeps its own.
"""
import copy
import inspect

from pyspark import keyword_only
from pyspark.ml.param import Param, Params, TypeConverters

# Accessor spellings that Horovod's estimators use and the rule below would not produce.
_CAMEL_AS_IN_HOROVOD = {"inmemory_cache_all": "InMemoryCacheAll", "shuffle_buffer_size": "ShufflingBufferSize",
                        "train_reader_num_workers": "TrainReaderNumWorker",
                        "val_reader_num_workers": "ValReaderNumWorker"}


class DeclaredParam(Param):
    """A Param that carries its default, which every instance of its class starts with."""

    def __init__(self, name: str, doc: str, converter=TypeConverters.identity, default=None):
        super().__init__(Params._dummy(), name, doc, typeConverter=converter)
        self.default = default

    def fresh_default(self):
        """The default, as a copy where it is a container, so that no two stages share one."""
        return copy.copy(self.default) if isinstance(self.default, (list, dict, set)) else self.default


def declare_param(name: str, doc: str, converter=TypeConverters.identity, default=None) -> DeclaredParam:
    """A Param for a ``KeywordParams`` class body: its name (the keyword), what it means, the
    pyspark type converter its values pass through, and the value it has until set."""
    return DeclaredParam(name, doc, converter, default)


def _camel(name: str) -> str:
    if name in _CAMEL_AS_IN_HOROVOD:
        return _CAMEL_AS_IN_HOROVOD[name]
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _getter(name):
    def get(self):
        return self.getOrDefault(name)
    get.__name__ = "get" + _camel(name)
    get.__doc__ = "Value of the ``%s`` param (or its default)." % name
    return get


def _setter(name):
    def set_(self, value):
        return self._set(**{name: value})
    set_.__name__ = "set" + _camel(name)
    set_.__doc__ = "Set the ``%s`` param; returns self." % name
    return set_


def _add_accessors(cls):
    for name, value in list(vars(cls).items()):
        if isinstance(value, Param):
            for accessor in (_getter(name), _setter(name)):
                if accessor.__name__ not in vars(cls):
                    accessor.__qualname__ = "%s.%s" % (cls.__qualname__, accessor.__name__)
                    accessor.__module__ = cls.__module__
                    setattr(cls, accessor.__name__, accessor)


def _declared(cls) -> dict:
    """{name: DeclaredParam} of ``cls`` and its bases, base classes' first, in declaration order."""
    for name, value in vars(cls).items():
        # pyspark finds a Param by its name as an attribute of the stage.
        if isinstance(value, DeclaredParam) and name != value.name:
            raise TypeError("%s.%s declares the Param %r: a Param's attribute must have its name"
                            % (cls.__qualname__, name, value.name))
    found = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, DeclaredParam):
                found[name] = value
    return found


def _signature(cls, defaults: bool) -> inspect.Signature:
    self_ = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    keywords = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=p.default if defaults else None)
                for name, p in cls.declared_params.items()]
    aliases = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in cls.keyword_aliases]
    return inspect.Signature([self_] + keywords + aliases)


def _init_doc(cls) -> str:
    lines = ["Keyword arguments only, one per Param (``explainParams()`` shows their values):", ""]
    for name, p in cls.declared_params.items():
        lines.append("- ``%s`` (default %r): %s" % (name, p.default, p.doc))
    for name, target in cls.keyword_aliases.items():
        lines.append("- ``%s``: Horovod's name for ``%s``" % (name, target))
    return "\n".join(lines)


def _accepted(cls) -> frozenset:
    return frozenset(cls.declared_params) | frozenset(cls.keyword_aliases)


def _make_init(cls):
    accepted = _accepted(cls)

    def __init__(self, **kwargs):
        unknown = [k for k in kwargs if k not in accepted]
        if unknown:
            self.refuse_keywords("__init__", unknown)
        super(cls, self).__init__()
        self.setParams(**kwargs)

    __init__.__qualname__ = "%s.__init__" % cls.__qualname__
    __init__.__module__ = cls.__module__
    __init__.__doc__ = _init_doc(cls)
    wrapped = keyword_only(__init__)
    wrapped.__signature__ = _signature(cls, defaults=True)
    return wrapped


def _make_set_params(cls):
    accepted = _accepted(cls)

    def setParams(self, **kwargs):
        unknown = [k for k in kwargs if k not in accepted]
        if unknown:
            self.refuse_keywords("setParams", unknown)
        return self._set(**self.params_from_keywords(kwargs))

    setParams.__qualname__ = "%s.setParams" % cls.__qualname__
    setParams.__module__ = cls.__module__
    setParams.__doc__ = "Set the given params (keyword arguments only); None leaves a param as it is."
    wrapped = keyword_only(setParams)
    wrapped.__signature__ = _signature(cls, defaults=False)
    return wrapped


class KeywordParams(Params):
    """Params whose subclasses take their declared Params as keywords (see the module's doc)."""

    # Keywords taken besides the Params' own names: {keyword: name of the Param it sets}.
    keyword_aliases = {}
    # {name: DeclaredParam} of the class, base classes' first: its keywords, in signature order.
    declared_params = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.declared_params = _declared(cls)
        _add_accessors(cls)
        if "__init__" not in vars(cls):
            cls.__init__ = _make_init(cls)
        if "setParams" not in vars(cls):
            cls.setParams = _make_set_params(cls)

    def __init__(self):
        super().__init__()
        self._setDefault(**{name: p.fresh_default() for name, p in type(self).declared_params.items()})

    def refuse_keywords(self, method: str, unknown: list) -> None:
        """Raise for keywords of a call to ``method`` that name no Param (``unknown``, in call
        order): the TypeError Python raises for a keyword a function does not take. A subclass may
        say more."""
        owner = next(k for k in type(self).__mro__ if method in vars(k))
        raise TypeError("%s.%s() got an unexpected keyword argument %r" % (owner.__qualname__, method, unknown[0]))

    def params_from_keywords(self, kwargs: dict) -> dict:
        """{Param name: value} that keywords set: those not None, an alias under its Param's name;
        a Param and its alias given together must agree."""
        aliases = type(self).keyword_aliases
        out = {k: v for k, v in kwargs.items() if v is not None and k not in aliases}
        for alias, name in aliases.items():
            value = kwargs.get(alias)
            if value is None:
                continue
            if name in out and self._resolveParam(name).typeConverter(out[name]) != \
                    self._resolveParam(name).typeConverter(value):
                raise ValueError("%s got %s=%r and %s=%r: they are the same Param, give one" %
                                 (type(self).__name__, name, out[name], alias, value))
            out[name] = value
        return out
