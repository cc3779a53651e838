"""Framework-free machinery of the estimators: each framework's estimator and model (``torch_*.py``,
``keras_*.py``) implement hooks into it.

Driver side: ``declared_params`` (a Param declared once gives a stage its keywords, setParams and
accessors), ``params`` (the Params every estimator and model shares), ``checks`` (validation before
any job), ``fit`` (the orchestration), ``data_source``, ``progress_driver``, ``model`` +
``persistence`` + ``inference`` (the fitted Model). Rank side (no pyspark): ``spec``, ``rank_data``,
``rank_trainer``, ``history``, ``checkpoint``, ``progress_rank``, ``shapes``.
"""
