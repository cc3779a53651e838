"""The cache key of a prepared dataset: what the DataFrame computes plus how it is written.

The plan's string alone is not enough: a DataFrame built from Python data or an RDD prints as
``LogicalRDD [cols]`` whatever rows it holds. So the key combines
- the canonicalized optimized plan (expression ids normalized, so two identically built DataFrames
  match),
- Spark's semantic hash of the plan (covers the rows of local relations and the identity of RDDs),
- the input files (a Spark-overwritten table gets new part-file names),
- the Spark application id when the plan reads an RDD, since an RDD's identity means nothing in
  another session,
- the prepare parameters that change the files.
No Spark job is run. Data changed in place under the same file names is not detected.
"""
import hashlib
import json
import re
from typing import Any, Dict

from pyspark.sql import DataFrame

from horovod_spark.session import is_connect_dataframe

KEY_VERSION = "1"
_SESSION_BOUND_LEAVES = ("LogicalRDD", "ExternalRDD")
# Expression ids (``#12L``) differ between two identically built DataFrames; the JVM's
# canonicalized plan numbers them from 0, the explain text of a Spark Connect client does not.
_EXPRESSION_ID = re.compile(r"#\d+")


def dataset_key(df: DataFrame, params: Dict[str, Any]) -> str:
    remote = is_connect_dataframe(df)
    plan = _connect_plan(df) if remote else df._jdf.queryExecution().optimizedPlan().canonicalized().toString()
    parts = {
        "version": KEY_VERSION,
        "plan": plan,
        "semantic_hash": df.semanticHash(),
        "input_files": sorted(df.inputFiles()),
        "params": params,
    }
    if any(leaf in plan for leaf in _SESSION_BOUND_LEAVES):
        parts["application"] = (df.sparkSession.conf.get("spark.app.id") if remote
                                else df.sparkSession.sparkContext.applicationId)
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode("utf-8")).hexdigest()
    return "ds-" + digest[:24]


def _connect_plan(df: DataFrame) -> str:
    """A Spark Connect client cannot reach the JVM plan: the optimized plan of its extended
    explain text, expression ids normalized."""
    text = df._explain_string(extended=True)
    start = text.find("== Optimized Logical Plan ==")
    end = text.find("== Physical Plan ==")
    section = text[start:end] if start >= 0 else text
    return _EXPRESSION_ID.sub("#", section)
