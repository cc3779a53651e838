"""Telling a Spark Connect client session from a classic one, without importing the client's
dependencies (grpc, ...) when pyspark was installed without them."""


def _connect_session_class():
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # pyspark without the Spark Connect client packages
        return None
    return ConnectSession


def is_connect_session(session) -> bool:
    cls = _connect_session_class()
    return cls is not None and isinstance(session, cls)


def is_connect_dataframe(df) -> bool:
    return is_connect_session(getattr(df, "sparkSession", None))


def active_connect_session():
    """This thread's active Spark Connect session, else the client's default one (a session built
    on another thread), or None."""
    cls = _connect_session_class()
    if cls is None:
        return None
    session = cls.getActiveSession()
    if session is None:
        default = getattr(cls, "_get_default_session", None)
        session = default() if default is not None else None
    return session if session is not None and not session.is_stopped else None
