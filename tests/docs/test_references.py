"""Every reference in the repo's own text points at a file the repo holds.

Three checks over the repo's text files (tracked, plus new files git does not ignore):

* no file names notes kept outside the repo (the strings in ``OUTSIDE_NOTES``);
* every relative Markdown link ``[text](path)`` in a ``.md`` file resolves, from that file's
  folder, to a file or folder of the repo (anchors dropped; web and mail links skipped);
* every ``docs/<name>.md`` path named in a ``.py``, ``.yaml`` or ``.md`` file exists.

Each failure names the file and line, so the fix is a search away.
"""

from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]

#: Suffixes (and bare names) of the text files scanned.
TEXT_SUFFIXES = (".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".ipynb")
TEXT_NAMES = ("Makefile",)

#: Names of notes that live outside the repo; built from pieces so that this file, which is
#: scanned too, does not contain them. Case-sensitive: the repo's own lowercase design page
#: (docs/design.md) is not one of them.
OUTSIDE_NOTES = tuple("".join(parts) for parts in (
    ("..", "/sha", "red"), ("sha", "red/", "DESIGN"), ("DESIGN", ".md"), ("MODELS", ".md")))

#: ``[text](target)`` or ``![alt](target)``, with an optional title after the target.
MARKDOWN_LINK = re.compile(r"\[(?:[^\]\\]|\\.)*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[\"'][^)]*)?\)")
#: A path ``docs/<name>.md`` (or deeper) that is not the tail of a longer path or word.
DOCS_PATH = re.compile(r"(?<![\w./-])docs/[\w.-]+(?:/[\w.-]+)*\.md\b")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+\1")
SKIPPED_SCHEMES = ("http://", "https://", "mailto:")


@lru_cache(maxsize=1)
def repo_files() -> tuple[str, ...]:
    """Repo-relative paths of tracked files and of new files git does not ignore, that exist."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True).stdout.decode("utf-8").split("\0")
    return tuple(sorted({p for p in listed if p and (ROOT / p).is_file()}))


@lru_cache(maxsize=1)
def repo_dirs() -> frozenset[str]:
    """Every folder that holds at least one repo file ("" is the root)."""
    dirs = {""}
    for path in repo_files():
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return frozenset(dirs)


def text_files(suffixes=TEXT_SUFFIXES, names=TEXT_NAMES) -> list[str]:
    return [p for p in repo_files()
            if p.endswith(tuple(suffixes)) or p.rsplit("/", 1)[-1] in names]


def read_lines(path: str) -> list[str]:
    return (ROOT / path).read_text(encoding="utf-8", errors="replace").splitlines()


def in_repo(target: Path) -> bool:
    """Whether ``target`` (absolute) is a repo file or a folder holding repo files."""
    try:
        relative = target.resolve().relative_to(ROOT)
    except ValueError:  # outside the repo
        return False
    key = relative.as_posix()
    key = "" if key == "." else key
    return key in set(repo_files()) or key in repo_dirs()


def markdown_prose_lines(path: str) -> list[tuple[int, str]]:
    """(line number, text) of a Markdown file outside fenced code, with inline code removed."""
    lines, fenced = [], False
    for number, line in enumerate(read_lines(path), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, INLINE_CODE.sub("", line)))
    return lines


def link_problem(md_path: str, target: str) -> str | None:
    """Why a Markdown link target is broken, or None when it resolves (or is not local)."""
    target = target.strip()
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1].strip()
    if not target or target.startswith("#") or target.lower().startswith(SKIPPED_SCHEMES):
        return None
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # another scheme (ftp:, data:, ...)
        return None
    path = unquote(target.split("#", 1)[0].split("?", 1)[0])
    if not path:
        return None
    base = ROOT if path.startswith("/") else (ROOT / md_path).parent
    resolved = base / path.lstrip("/")
    if not resolved.exists():
        return f"links to {target!r}, which does not exist"
    if not in_repo(resolved):
        return f"links to {target!r}, which is not a file of the repo"
    return None


def test_no_file_names_notes_kept_outside_the_repo():
    problems = []
    for path in text_files():
        for number, line in enumerate(read_lines(path), start=1):
            for needle in OUTSIDE_NOTES:
                if needle in line:
                    problems.append(f"{path}:{number}: names {needle!r} (outside the repo): "
                                    f"{line.strip()[:120]}")
    assert not problems, "references to notes outside the repo:\n" + "\n".join(problems)


def test_every_relative_markdown_link_resolves():
    problems = []
    for path in text_files(suffixes=(".md",), names=()):
        for number, line in markdown_prose_lines(path):
            for match in MARKDOWN_LINK.finditer(line):
                problem = link_problem(path, match.group(1))
                if problem:
                    problems.append(f"{path}:{number}: {problem}")
    assert not problems, "broken Markdown links:\n" + "\n".join(problems)


def test_every_named_docs_page_exists():
    problems = []
    for path in text_files(suffixes=(".py", ".yaml", ".yml", ".md"), names=()):
        for number, line in enumerate(read_lines(path), start=1):
            for match in DOCS_PATH.finditer(line):
                if not in_repo(ROOT / match.group(0)):
                    problems.append(f"{path}:{number}: names {match.group(0)}, which is not "
                                    f"in the repo")
    assert not problems, "docs pages named but missing:\n" + "\n".join(problems)


def test_the_checks_catch_what_they_are_for():
    """The link checker itself: a missing target is reported, existing ones and web links are
    not; fenced code and inline code are not read as links."""
    assert link_problem("README.md", "docs/at_grpo.md#one-iteration") is None
    assert link_problem("docs/at_grpo.md", "../bench/RESULTS.md") is None
    assert link_problem("docs/at_grpo.md", "https://arxiv.org/abs/2510.11062") is None
    assert link_problem("README.md", "#tests") is None
    assert link_problem("README.md", "docs/" + "no_such_page.md") is not None  # split: scanned too
    assert link_problem("docs/at_grpo.md", "../../outside.md") is not None
    assert [m.group(1) for m in MARKDOWN_LINK.finditer(
        'see [a](x.md) and ![b](<y z.png> "t")')] == ["x.md", "<y z.png>"]
    assert DOCS_PATH.findall("see docs/gpu.md, not bench/docs/x.md or mydocs/y.md") == [
        "docs/gpu.md"]
    assert INLINE_CODE.sub("", "a `[x](gone.md)` b") == "a  b"
