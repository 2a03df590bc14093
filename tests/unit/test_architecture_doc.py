"""The documentation stays true to the tree: ARCHITECTURE.md's codemap and
paths, the links between pages, the names the limit tables cite, and the
sizes that keep the top-level pages short.

Fast and without I/O beyond reading files (the markdown, and the Python
files ARCHITECTURE.md names, parsed with ``ast``; nothing is imported).

What each test checks, and how to fix a failure:

* every path in ARCHITECTURE.md's backticks exists (a code span with a ``/``
  or a file suffix, ``*`` as a glob): a file moved, so write its new path;
* every ``file.py:name`` names a function, class, method (``Class.method``)
  or module-level constant defined in that file: rename the step;
* every package directory under ``partlog/``, ``walmgr/``, ``spark/`` and
  ``simulations/`` (a directory with ``__init__.py``), and the top-level
  directories ``docs/``, ``examples/``, ``scripts/`` and ``tests/``, has a
  codemap entry, a line ``* `dir/`: ...`` in the Codemap section: add one
  (two lines: what it is, its key files);
* every relative link in README.md, ARCHITECTURE.md, design.md and docs/
  resolves to a file, and its ``#anchor`` to a heading of that file (GitHub's
  slugs): fix the link or the heading;
* every upper-case name in backticks in docs/design/limits.md and
  docs/security.md is a constant (module or class level) of partlog, walmgr
  or spark;
* ARCHITECTURE.md's Layers table lists the floors of tests/layers.py: edit both;
* README.md is at most 8 kB, design.md at most 25 kB, ARCHITECTURE.md at most
  300 lines and each page of docs/design/ at most 400 lines: move detail down
  a level (design.md to docs/design/, dated results to docs/measurements/).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tests.paths import REPO

ARCHITECTURE = REPO / "ARCHITECTURE.md"
PACKAGE_ROOTS = ("partlog", "walmgr", "spark", "simulations")
TOP_LEVEL_DIRS = ("docs", "examples", "scripts", "tests")
LIMIT_PAGES = (REPO / "docs" / "design" / "limits.md", REPO / "docs" / "security.md")

README_BYTES_MAX = 8 * 1024
DESIGN_BYTES_MAX = 25 * 1024
ARCHITECTURE_LINES_MAX = 300
DESIGN_PAGE_LINES_MAX = 400

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
_PATHLIKE = re.compile(r"^\.?[\w][\w./*-]*(?::[A-Za-z_][\w.]*)?$")
_SUFFIXES = (".py", ".md", ".toml", ".json", ".txt", ".sh")
_UPPER = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks (line count kept)."""
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _spans(text: str) -> Iterator[tuple[int, str]]:
    """(line, content) of every inline code span outside fenced blocks."""
    prose = _prose(text)
    for m in _SPAN.finditer(prose):
        yield prose.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split())


def _path_spans(text: str) -> Iterator[tuple[int, str, str | None]]:
    """(line, path, name or None) of the code spans that name a path."""
    for line, span in _spans(text):
        if "://" in span or not _PATHLIKE.match(span):
            continue
        path, _, name = span.partition(":")
        if "/" in path or path.endswith(_SUFFIXES):
            yield line, path, name or None


def _exists(path: str) -> bool:
    if "*" in path:
        return any(REPO.glob(path.rstrip("/")))
    return (REPO / path).exists()


@cache
def _defined(path: str) -> frozenset[str]:
    """Names ``path`` defines: functions, classes, ``Class.method`` (and
    ``Class.Inner``), and module-level constants."""
    tree = ast.parse((REPO / path).read_text(encoding="utf-8"), filename=path)
    names: set[str] = set()

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(prefix + node.name)
                if isinstance(node, ast.ClassDef):
                    walk(node.body, f"{prefix}{node.name}.")
            elif not prefix and isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif not prefix and isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)

    walk(tree.body, "")
    return frozenset(names)


def _codemap_entries() -> dict[str, int]:
    """Codemap entry (a directory, with its trailing slash) -> its line."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index("\n## Codemap\n")
    end = text.index("\n## ", start + 1)
    first_line = text.count("\n", 0, start) + 2
    entries: dict[str, int] = {}
    for i, line in enumerate(text[start:end].splitlines()):
        m = re.match(r"^\* `([^`]+/)`:", line)
        if m:
            entries[m.group(1)] = first_line + i - 1
    return entries


def _packages() -> list[str]:
    found = []
    for root in PACKAGE_ROOTS:
        for init in sorted((REPO / root).rglob("__init__.py")):
            rel = init.parent.relative_to(REPO)
            if "__pycache__" not in rel.parts:
                found.append(f"{rel.as_posix()}/")
    return found


def _doc_pages() -> list[Path]:
    pages = [REPO / "README.md", ARCHITECTURE, REPO / "design.md"]
    return pages + sorted((REPO / "docs").rglob("*.md"))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, markup and punctuation
    dropped, lower case, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


@cache
def _anchors(page: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in _HEADING.finditer(_prose(page.read_text(encoding="utf-8"))):
        slug = _slug(m.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return frozenset(out)


def _constants() -> frozenset[str]:
    """Upper-case names assigned at module or class level in partlog,
    walmgr and spark."""
    names: set[str] = set()
    for root in ("partlog", "walmgr", "spark"):
        for path in (REPO / root).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            bodies = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
            for body in bodies:
                for node in body:
                    targets = node.targets if isinstance(node, ast.Assign) else []
                    if isinstance(node, ast.AnnAssign):
                        targets = [node.target]
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
    return frozenset(n for n in names if _UPPER.match(n))


def test_architecture_paths_exist() -> None:
    stale = [
        f"ARCHITECTURE.md:{line}: `{path}` does not exist"
        for line, path, _ in _path_spans(ARCHITECTURE.read_text(encoding="utf-8"))
        if not _exists(path)
    ]
    assert not stale, "stale paths in ARCHITECTURE.md (a file moved?):\n" + "\n".join(stale)


def test_architecture_steps_name_defined_code() -> None:
    stale = []
    for line, path, name in _path_spans(ARCHITECTURE.read_text(encoding="utf-8")):
        if name is None:
            continue
        if not path.endswith(".py") or not (REPO / path).is_file():
            stale.append(f"ARCHITECTURE.md:{line}: `{path}:{name}`: {path} is not a Python file of the tree")
        elif name not in _defined(path):
            stale.append(f"ARCHITECTURE.md:{line}: `{path}:{name}`: {path} defines no {name}")
    assert not stale, "stale steps in ARCHITECTURE.md (renamed or moved?):\n" + "\n".join(stale)


def test_codemap_has_an_entry_for_every_package() -> None:
    entries = _codemap_entries()
    wanted = _packages() + [f"{d}/" for d in TOP_LEVEL_DIRS]
    missing = [
        f'ARCHITECTURE.md, Codemap: no entry for `{d}`; add a line "* `{d}`: what it is, its key files"'
        for d in wanted
        if d not in entries
    ]
    gone = [
        f"ARCHITECTURE.md:{line}: codemap entry `{d}` names a directory that does not exist"
        for d, line in entries.items()
        if not (REPO / d).is_dir()
    ]
    assert not missing + gone, "\n".join(missing + gone)


def test_relative_links_resolve() -> None:
    broken = []
    for page in _doc_pages():
        prose = _prose(page.read_text(encoding="utf-8"))
        prose = _SPAN.sub(lambda m: " " * len(m.group(0)), prose)
        for m in _LINK.finditer(prose):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto: ... are not checked here
            where = f"{page.relative_to(REPO)}:{prose.count(chr(10), 0, m.start()) + 1}"
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            if not dest.exists():
                broken.append(f"{where}: ({target}): {file_part} does not exist")
            elif anchor and (dest.suffix != ".md" or anchor not in _anchors(dest)):
                broken.append(f"{where}: ({target}): {dest.relative_to(REPO)} has no heading #{anchor}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_limit_tables_name_real_constants() -> None:
    known = _constants()
    unknown = [
        f"{page.relative_to(REPO)}:{line}: `{span}` is no constant of partlog, walmgr or spark"
        for page in LIMIT_PAGES
        for line, span in _spans(page.read_text(encoding="utf-8"))
        if _UPPER.match(span) and span not in known
    ]
    assert not unknown, "limit tables name constants that do not exist (renamed?):\n" + "\n".join(unknown)


def test_top_level_pages_stay_short() -> None:
    too_long = []
    if (n := len((REPO / "README.md").read_bytes())) > README_BYTES_MAX:
        too_long.append(f"README.md: {n} bytes, at most {README_BYTES_MAX}")
    if (n := len((REPO / "design.md").read_bytes())) > DESIGN_BYTES_MAX:
        too_long.append(f"design.md: {n} bytes, at most {DESIGN_BYTES_MAX}")
    if (n := len(ARCHITECTURE.read_text(encoding="utf-8").splitlines())) > ARCHITECTURE_LINES_MAX:
        too_long.append(f"ARCHITECTURE.md: {n} lines, at most {ARCHITECTURE_LINES_MAX}")
    for page in sorted((REPO / "docs" / "design").glob("*.md")):
        if (n := len(page.read_text(encoding="utf-8").splitlines())) > DESIGN_PAGE_LINES_MAX:
            too_long.append(f"{page.relative_to(REPO)}: {n} lines, at most {DESIGN_PAGE_LINES_MAX}")
    assert not too_long, "pages past their size (move detail down a level):\n" + "\n".join(too_long)


def test_the_layers_table_is_the_layer_contract() -> None:
    """ARCHITECTURE.md's Layers table lists tests/layers.py's FLOORS, floor by
    floor: edit both together."""
    from tests.layers import FLOORS

    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.+?) \|$", section, re.M)
    table = {int(n): frozenset(re.findall(r"`([\w.]+)`", cells)) for n, cells in rows}
    contract = dict(enumerate(FLOORS))
    assert table == contract, (
        "ARCHITECTURE.md's Layers table differs from tests/layers.py FLOORS:\n"
        f"  table:    {table}\n  contract: {contract}"
    )
