"""Machinery shared by the framework estimators (Torch now, Keras later).

Driver side: ``params`` (Spark ML Params), ``checks`` (validation before any job), ``fit`` (the
orchestration), ``data_source``, ``progress_driver``, ``model`` + ``persistence`` + ``inference``
(the fitted Model). Rank side (no pyspark): ``spec``, ``rank_data``, ``history``, ``checkpoint``,
``progress_rank``, ``shapes``.
"""
