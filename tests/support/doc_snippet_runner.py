"""Run the python blocks of one document in order in this interpreter, as notebook cells:
``python tests/support/doc_snippet_runner.py docs/spark.md``. Later blocks see the names earlier
ones defined. Tracebacks point at the document's own lines. Exit status 1 on the first failure."""
import os
import sys
import traceback

# Started by path: drop tests/support/ from the import path (its modules would shadow a reader's),
# and import the extractor through tests/.
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[0] = TESTS

from support.doc_snippets import ROOT, extract_blocks, read, setup_of  # noqa: E402


def _start_spark(master):
    from support.spark import start_spark
    return start_spark(master, "doc-snippets", log_level="ERROR")


def main(doc: str) -> int:
    text = read(doc)
    setup = setup_of(doc, text)
    namespace = {"__name__": "__main__"}
    if "spark" in setup:
        print("[doc snippets] %s: a SparkSession `spark` on %s, as the document states"
              % (doc, setup["spark"]), flush=True)
        namespace["spark"] = _start_spark(setup["spark"])
    path = os.path.join(ROOT, doc)
    try:
        for block in extract_blocks(doc, text):
            if not (block.runs and block.language == "python"):
                continue
            print("[doc snippets] %s: running the python block at line %d" % (doc, block.line), flush=True)
            # Padding puts every statement on its line of the document, so the traceback quotes it.
            code = compile("\n" * block.line + block.code, path, "exec")
            try:
                exec(code, namespace)
            except BaseException:
                traceback.print_exc()
                print("[doc snippets] FAILED: %s, the python block at line %d (traceback above)"
                      % (doc, block.line), flush=True)
                return 1
    finally:
        if "pyspark.sql" in sys.modules:  # stop the session a block started, so its JVM goes now
            active = sys.modules["pyspark.sql"].SparkSession.getActiveSession()
            if active is not None:
                active.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
