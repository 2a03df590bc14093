"""Find reads of the machine's clocks and entropy that bypass partlog.runtime.

    python -m tests.direct_reads [--root DIR]

Library code takes a :class:`partlog.runtime.Clock` and
:class:`partlog.runtime.Entropy` (or a function of one) from whoever builds
it; ``partlog/runtime.py`` is the one module that reads ``time`` and
``secrets`` (:data:`SYSTEM_CLOCK`, :data:`SYSTEM_ENTROPY`).  A direct read
anywhere else would leak wall time or real randomness into the
deterministic simulation unseen.  Found with ``ast``, aliases followed:

* ``time.time``, ``time_ns``, ``monotonic``, ``perf_counter``,
  ``process_time`` (and their ``_ns``), ``clock_gettime``: called, passed or
  imported by name (``time.sleep`` waits; it reads nothing);
* ``datetime.now``, ``utcnow``, ``today``;
* anything of ``secrets`` but ``compare_digest`` (which draws nothing);
* ``uuid.uuid1``, ``uuid.uuid4`` (uuid3/uuid5 are pure functions);
* the ``random`` module's functions and ``random.Random()`` /
  ``random.SystemRandom()`` without a seed;
* ``os.urandom``, ``os.getrandom``.

Exempt, because they measure or wait for the real world on purpose and are
never run inside the simulation: ``partlog/runtime.py``, the command lines,
launchers and benchmarks (``partlog/tools/``, ``partlog/util/seaweedfs.py``,
``walmgr/bench.py``, ``walmgr/registry_size.py``).
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("partlog", "walmgr", "spark")
EXEMPT = (
    "partlog/runtime.py",
    "partlog/tools/",
    "partlog/util/seaweedfs.py",
    "walmgr/bench.py",
    "walmgr/registry_size.py",
)

_TIME = frozenset(
    {
        "time",
        "time_ns",
        "monotonic",
        "monotonic_ns",
        "perf_counter",
        "perf_counter_ns",
        "process_time",
        "process_time_ns",
        "clock_gettime",
        "clock_gettime_ns",
    }
)
_DATETIME = frozenset({"now", "utcnow", "today"})
_UUID = frozenset({"uuid1", "uuid4"})
_OS = frozenset({"urandom", "getrandom"})
_SECRETS_PURE = frozenset({"compare_digest"})


@dataclass(frozen=True, slots=True)
class Read:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _forbidden(module: str, name: str) -> bool:
    if module == "time":
        return name in _TIME
    if module == "secrets":
        return name not in _SECRETS_PURE
    if module == "uuid":
        return name in _UUID
    if module == "os":
        return name in _OS
    if module == "random":
        # Random/SystemRandom are checked at their calls (a seeded Random is fine).
        return name not in {"Random", "SystemRandom"}
    return False


def reads_in(path: Path, rel: str) -> list[Read]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    modules: dict[str, str] = {}  # local name -> module it names (time, secrets, ...)
    datetimes: set[str] = set()  # local names of datetime.datetime / datetime.date
    found: list[Read] = []
    watched = {"time", "secrets", "uuid", "random", "os", "datetime"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in watched:
                    modules[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module in watched and not node.level:
            for a in node.names:
                if node.module == "datetime" and a.name in {"datetime", "date"}:
                    datetimes.add(a.asname or a.name)
                elif _forbidden(node.module, a.name):
                    found.append(Read(rel, node.lineno, f"from {node.module} import {a.name}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            mod = modules.get(node.value.id)
            if mod is not None and _forbidden(mod, node.attr):
                found.append(Read(rel, node.lineno, f"{mod}.{node.attr}"))
            if node.value.id in datetimes and node.attr in _DATETIME:
                found.append(Read(rel, node.lineno, f"{node.value.id}.{node.attr}"))
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _DATETIME
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and modules.get(node.value.value.id) == "datetime"
        ):
            found.append(Read(rel, node.lineno, f"datetime.{node.value.attr}.{node.attr}"))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and modules.get(node.func.value.id) == "random"
            and node.func.attr in {"Random", "SystemRandom"}
            and (node.func.attr == "SystemRandom" or not (node.args or node.keywords))
        ):
            found.append(Read(rel, node.lineno, f"random.{node.func.attr}() without a seed"))
    return sorted(found, key=lambda r: r.line)


def direct_reads(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[Read]:
    out: list[Read] = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if any(rel == e or (e.endswith("/") and rel.startswith(e)) for e in EXEMPT):
                continue
            out.extend(reads_in(path, rel))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=".", help="the repository (default: .)")
    args = p.parse_args(argv)
    found = direct_reads(Path(args.root).resolve())
    for r in found:
        print(r)
    print(f"{len(found)} direct read(s) of a clock or entropy")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
