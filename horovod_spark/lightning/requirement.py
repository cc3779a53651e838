"""Whether Lightning can be used here, and the error that says how to install it when it cannot.

Lightning is an optional dependency (the ``lightning`` extra). Modules that need it call
``require_lightning()`` before importing it, so a missing or too old install fails with one
message naming the extra, not with an ImportError from deep inside Lightning.
"""
EXTRA = "lightning"
INSTALL_HINT = "pip install 'horovod_spark[%s]'" % EXTRA
MINIMUM_VERSION = (2, 4)
# The first release the project has not been tested with; the estimator refuses it and later ones.
SUPPORTED_BELOW = (2, 7)


def _release(version: str):
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def require_lightning(what: str = "horovod_spark.lightning"):
    """Import and return ``lightning.pytorch``; raise ImportError naming ``INSTALL_HINT`` when the
    ``lightning`` package is missing or older than ``MINIMUM_VERSION``."""
    try:
        import lightning
        import lightning.pytorch as pl
    except ImportError as exc:
        raise ImportError("%s needs Lightning (the `lightning` package), which cannot be imported here (%s); "
                          "install it with: %s" % (what, exc, INSTALL_HINT)) from exc
    version = getattr(lightning, "__version__", "0")
    if _release(version) < MINIMUM_VERSION:
        raise ImportError("%s needs lightning >= %s, found %s; upgrade it with: %s"
                          % (what, ".".join(map(str, MINIMUM_VERSION)), version, INSTALL_HINT))
    return pl


def require_supported_lightning(what: str):
    """``require_lightning(what)``, and an ImportError when the installed release is
    ``SUPPORTED_BELOW`` or later: the estimator reaches into the Trainer's checkpoints and loops,
    which a release the project was not tested with may have changed."""
    pl = require_lightning(what)
    import lightning
    if _release(lightning.__version__) >= SUPPORTED_BELOW:
        raise ImportError("%s supports lightning >= %s and < %s, found %s; install a supported release with: %s"
                          % (what, ".".join(map(str, MINIMUM_VERSION)), ".".join(map(str, SUPPORTED_BELOW)),
                             lightning.__version__, INSTALL_HINT))
    return pl
