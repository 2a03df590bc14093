"""Print the import cycles among the modules of some packages (ast-based).

    python -m tests.import_cycles [--root DIR] [PACKAGE ...]    # default: partlog walmgr spark

Every ``import``/``from ... import`` in a module is an arrow to the project
module it names (``from partlog.x import y`` is an arrow to ``partlog.x.y``
when that is a module, else to ``partlog.x``; relative imports are resolved).
Imports anywhere count, in functions too (a lazy import is still a
dependency), in three views:

* ``runtime``: every import except those under ``if TYPE_CHECKING:``;
* ``eager``: only imports executed when the module is imported (not inside
  a function or class body, not under ``if TYPE_CHECKING:``): these are the
  cycles that can fail with a partially initialised module;
* ``typing``: every import, ``TYPE_CHECKING`` ones included (mypy's view).

The implicit import of a parent package's ``__init__`` is not an arrow.
A cycle is a strongly connected component of two or more modules; one
shortest cycle through it is shown with the file:line of each arrow.
Exit status 1 if the runtime view has a cycle.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import deque
from itertools import pairwise
from pathlib import Path

VIEWS = ("runtime", "eager", "typing")


def module_files(root: Path, packages: list[str]) -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in packages:
        base = root / pkg
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if any(p.startswith(".") or p == "__pycache__" for p in parts):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path, module: str, is_pkg: bool) -> list[tuple[str, int, bool, bool]]:
    """(imported name, line, eager, type_checking_only) for each name imported."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: list[tuple[str, int, bool, bool]] = []
    package = module if is_pkg else module.rpartition(".")[0]

    def visit(node: ast.AST, eager: bool, typing_only: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.append((alias.name, node.lineno, eager, typing_only))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                # resolve() falls back from base.name (a submodule) to base.
                out.append((f"{base}.{alias.name}" if alias.name != "*" else base, node.lineno, eager, typing_only))
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, eager, True)
            for child in node.orelse:
                visit(child, eager, typing_only)
            return
        nested = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef)
        for other in ast.iter_child_nodes(node):
            visit(other, eager and not nested, typing_only)

    visit(tree, True, False)
    return out


def resolve(name: str, mods: dict[str, Path]) -> str | None:
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in mods:
            return cand
        parts.pop()
    return None


def build_graph(root: Path, packages: list[str]) -> tuple[dict[str, Path], dict[str, dict[str, dict[str, int]]]]:
    """graph[view][src][dst] = first line of an arrow src -> dst in that view."""
    mods = module_files(root, packages)
    graph: dict[str, dict[str, dict[str, int]]] = {v: {m: {} for m in mods} for v in VIEWS}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for name, line, eager, typing_only in imports(path, mod, is_pkg):
            target = resolve(name, mods)
            if target is None or target == mod:
                continue
            views = ["typing"]
            if not typing_only:
                views.append("runtime")
                if eager:
                    views.append("eager")
            for v in views:
                graph[v][mod].setdefault(target, line)
    return mods, graph


def sccs(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(out)


def shortest_cycle(graph: dict[str, dict[str, int]], comp: list[str]) -> list[str]:
    members = set(comp)
    best: list[str] | None = None
    for start in comp:
        prev: dict[str, str | None] = {start: None}
        q = deque([start])
        found = None
        while q and found is None:
            v = q.popleft()
            for w in sorted(graph[v]):
                if w not in members:
                    continue
                if w == start:
                    found = v
                    break
                if w not in prev:
                    prev[w] = v
                    q.append(w)
        if found is not None:
            path = [found]
            while prev[path[-1]] is not None:
                path.append(prev[path[-1]])  # type: ignore[arg-type]
            path.reverse()
            path.append(start)
            if best is None or len(path) < len(best):
                best = path
    assert best is not None
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=".", help="the repository (default: .)")
    p.add_argument("packages", nargs="*", default=["partlog", "walmgr", "spark"])
    args = p.parse_args(argv)
    root = Path(args.root).resolve()
    mods, graph = build_graph(root, args.packages)
    status = 0
    for view in VIEWS:
        g = graph[view]
        arrows = sum(len(d) for d in g.values())
        comps = sccs(g)
        print(f"[{view}] {len(mods)} modules, {arrows} import arrows, {len(comps)} cycle(s)")
        for comp in comps:
            cyc = shortest_cycle(g, comp)
            arrows_txt = []
            for a, b in pairwise(cyc):
                rel = mods[a].relative_to(root)
                arrows_txt.append(f"{a} -> {b} ({rel}:{g[a][b]})")
            extra = f"  [component of {len(comp)}: {', '.join(comp)}]" if len(comp) > len(cyc) - 1 else ""
            print("  cycle: " + " ; ".join(arrows_txt) + extra)
        if view == "runtime" and comps:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
