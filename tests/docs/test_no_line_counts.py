"""No document quotes a file's or function's line count: they go stale with the next change
(docs/design.md quoted counts three releases old). Say what a file holds instead."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: "(~85 lines)", "515 lines", "a 602-line module", "about 20 lines": counts of code.
LINE_COUNT = re.compile(r"\b(?:~|about )?\d[\d,]*[ -]lines?\b", re.IGNORECASE)


def test_no_document_quotes_a_line_count():
    quoted = []
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if LINE_COUNT.search(line):
                quoted.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not quoted, "line counts go stale; describe the file instead:\n" + "\n".join(quoted)


def test_the_pattern_finds_the_forms_that_went_stale():
    for text in ("(~85 lines)", "a 602-line module", "about 20 lines", "1,774 lines"):
        assert LINE_COUNT.search(text), text
    assert not LINE_COUNT.search("the first screen holds what it is, in lines of prose")
