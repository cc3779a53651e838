"""The extractor behind test_doc_snippets: which blocks it finds, refuses and runs."""
import pytest
from support.doc_snippets import extract_blocks, problems, setup_of

DOC = """# Title
<!-- snippets: spark local[2] -->

```python
x = 1
```

<!-- fragment: needs a Databricks cluster -->
```python
%pip install something
```

- a list item:

  ```bash
  echo indented
  ```

```dockerfile
FROM python:3.11-slim
```

<!-- fragment: -->
```
output
```
"""


def test_finds_every_block_with_its_line_language_and_code():
    blocks = extract_blocks("doc.md", DOC)
    assert [(b.line, b.language, b.code) for b in blocks] == [
        (4, "python", "x = 1"), (9, "python", "%pip install something"), (15, "bash", "echo indented"),
        (19, "dockerfile", "FROM python:3.11-slim"), (24, "", "output")]


def test_a_fragment_marker_keeps_a_block_from_running():
    blocks = extract_blocks("doc.md", DOC)
    assert [b.runs for b in blocks] == [True, False, True, False, False]
    assert blocks[1].fragment == "needs a Databricks cluster"


def test_unmarked_blocks_it_cannot_run_and_reasonless_markers_are_refused():
    refused = problems(extract_blocks("doc.md", DOC))
    assert len(refused) == 2
    assert refused[0].startswith("doc.md:19: a block in 'dockerfile' cannot be run")
    assert "<!-- fragment: WHY -->" in refused[0]
    assert refused[1].startswith("doc.md:24: the fragment marker gives no reason")


def test_an_unclosed_fence_is_an_error():
    with pytest.raises(ValueError, match="doc.md:1: this code fence is never closed"):
        extract_blocks("doc.md", "```python\nx = 1\n")


def test_the_snippets_marker_names_a_spark_master():
    assert setup_of("doc.md", DOC) == {"spark": "local[2]"}
    assert setup_of("doc.md", "no marker") == {}
    with pytest.raises(ValueError, match="doc.md:1: the snippets marker reads"):
        setup_of("doc.md", "<!-- snippets: a database -->")


def test_the_runner_shares_names_between_blocks_and_names_the_failing_line(tmp_path):
    import os
    import subprocess
    import sys

    from support.doc_snippets import ROOT
    doc = tmp_path / "notebook.md"
    doc.write_text("# A\n\n```python\ngreeting = 'hi'\n```\n\n<!-- fragment: never runs -->\n```python\n"
                   "raise SystemExit(3)\n```\n\n```python\nprint(greeting)\nprint(undefined_name)\n```\n")
    runner = os.path.join(ROOT, "tests", "support", "doc_snippet_runner.py")
    done = subprocess.run([sys.executable, runner, str(doc)], cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "hi\n" in done.stdout
    assert "FAILED: %s, the python block at line 12" % doc in done.stdout
    assert 'notebook.md", line 14' in done.stderr and "print(undefined_name)" in done.stderr
