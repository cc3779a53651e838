"""The fenced code blocks of the user documentation, and what it takes to run them.

Every fenced block of README.md and docs/*.md either runs as pasted or is a fragment: the line right
before its opening fence is ``<!-- fragment: WHY -->``, WHY saying what it needs to run. A document
states what its reader has before its first block with one line of the form
``<!-- snippets: spark local[2] -->`` (a SparkSession named ``spark`` on that master); nothing else
is provided. Python blocks of one document run in order in one interpreter, as notebook cells do;
bash blocks run one by one with ``bash -euo pipefail`` in the repository root.
"""
import dataclasses
import glob
import os
import re
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNABLE_LANGUAGES = ("python", "bash")

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<language>[^\s`]*)")
_FRAGMENT = re.compile(r"^\s*<!--\s*fragment:(?P<why>.*?)-->\s*$")
_SNIPPETS = re.compile(r"^\s*<!--\s*snippets:(?P<setup>.*?)-->\s*$")


@dataclasses.dataclass(frozen=True)
class Block:
    doc: str            # path relative to the repository root
    line: int           # 1-based line of the opening fence
    language: str       # "" when the fence names none
    code: str           # the block's lines, dedented to the fence's indentation
    fragment: Optional[str]  # the marker's reason, None when unmarked

    @property
    def where(self) -> str:
        return "%s:%d" % (self.doc, self.line)

    @property
    def runs(self) -> bool:
        return self.fragment is None and self.language in RUNNABLE_LANGUAGES


def documents() -> List[str]:
    """README.md and docs/*.md (docs/dev/ is for the project's developers), relative to ROOT."""
    docs = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return ["README.md"] + docs


def read(doc: str) -> str:
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        return f.read()


def extract_blocks(doc: str, text: str) -> List[Block]:
    """Every fenced block of ``text`` (the contents of ``doc``), in order. An unclosed fence is an
    error: Markdown would swallow the rest of the document into it."""
    lines = text.split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening.group("fence"), len(opening.group("indent"))
        closing = re.compile(r"^\s*%s%s*\s*$" % (re.escape(fence), re.escape(fence[0])))
        end = i + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        if end == len(lines):
            raise ValueError("%s:%d: this code fence is never closed" % (doc, i + 1))
        marker = _FRAGMENT.match(lines[i - 1]) if i > 0 else None
        code = "\n".join(line[indent:] if line[:indent].strip() == "" else line.lstrip()
                         for line in lines[i + 1:end])
        blocks.append(Block(doc, i + 1, opening.group("language").lower(), code,
                            marker.group("why").strip() if marker else None))
        i = end + 1
    return blocks


def problems(blocks: List[Block]) -> List[str]:
    """Why each block that neither runs nor is a proper fragment is refused."""
    found = []
    for block in blocks:
        if block.fragment == "":
            found.append("%s: the fragment marker gives no reason: write what the block needs, as in "
                         "<!-- fragment: needs a Databricks cluster -->" % block.where)
        elif block.fragment is None and block.language not in RUNNABLE_LANGUAGES:
            found.append("%s: a block in %r cannot be run (only %s blocks run): put "
                         "<!-- fragment: WHY --> on the line right before its fence, WHY saying what it "
                         "needs" % (block.where, block.language or "no language",
                                    " and ".join(RUNNABLE_LANGUAGES)))
    return found


def setup_of(doc: str, text: str) -> Dict[str, str]:
    """What the document says its reader has: ``{"spark": master}`` or ``{}``."""
    setup: Dict[str, str] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        marker = _SNIPPETS.match(line)
        if not marker:
            continue
        words = marker.group("setup").split()
        if len(words) != 2 or words[0] != "spark" or "spark" in setup:
            raise ValueError("%s:%d: the snippets marker reads <!-- snippets: spark MASTER --> (once per "
                             "document), e.g. <!-- snippets: spark local[2] -->; got %r"
                             % (doc, number, line.strip()))
        setup["spark"] = words[1]
    return setup
