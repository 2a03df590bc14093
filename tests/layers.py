"""The layer contract: packages sit on floors and import only downwards.

    python -m tests.layers [--root DIR]        # prints every arrow that breaks the contract

A *unit* is a subpackage or top-level module of ``partlog`` (``partlog.store``,
``partlog.limits``), the ``partlog`` package's own ``__init__`` (``partlog``),
or one of the top-level packages (``walmgr``, ``spark``, ``simulations``,
``simulations.dst``).  Every import of one unit's module by another unit's
module is an arrow between the units, counted in mypy's view (imports under
``if TYPE_CHECKING:`` and imports inside functions count: a lazy or typing-only
import is still a dependency; tests/import_cycles.py finds them).

The contract (``FLOORS``, bottom first): a unit may import a unit on a strictly
lower floor only.  Units on one floor are independent of each other (no arrow
either way), so a floor is a set of peers that can be read, tested and changed
apart.  A unit not on any floor is itself a violation: a new package must be
given its floor here, which is the moment to decide where it belongs.

To see the test fail, add an upward import, e.g. ``from partlog.broker.server
import Broker`` under ``if TYPE_CHECKING:`` in ``partlog/store/log.py``, and run
``pytest tests/unit/test_layers.py``: it names the arrow with its file and line.
(``tests/unit/test_layers.py`` also builds such a tree in a temporary directory and
checks that the contract refuses it.)
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.import_cycles import build_graph

PACKAGES = ("partlog", "walmgr", "spark", "simulations")

# Bottom first.  Each floor lists peers that must not import each other.
FLOORS: tuple[frozenset[str], ...] = tuple(
    frozenset(floor)
    for floor in (
        # Ground: limits, the injected clock and entropy, utilities, the
        # simulation's mutation switches, the lazy-export helper.
        ("partlog.limits", "partlog.runtime", "partlog.util", "partlog.injected_bugs", "partlog.lazy_exports"),
        # Kafka's formats and semantics: records, batch headers, errors, epochs.
        ("partlog.kafka",),
        # WAL segments and object stores; the LMDB close gate.
        ("partlog.wal", "partlog.lmdb_gate"),
        # The sans-IO cores, the store and tiered segments, side by side.
        (
            "partlog.store",
            "partlog.produce",
            "partlog.fetch",
            "partlog.groups",
            "partlog.txn",
            "partlog.acl",
            "partlog.tiered",
        ),
        # Inter-broker RPC: frames, schemas, transport.
        ("partlog.rpc",),
        # Cluster metadata: the contract, the embedded controller, etcd.
        ("partlog.controller",),
        # Replication: the leader's appends and HWM, the followers' fetchers.
        ("partlog.replication",),
        # The broker's services.
        ("partlog.broker",),
        # The Kafka wire front end, on the broker's port.
        ("partlog.kafka_front",),
        # The composition root, the package facade, and partlog's own client
        # library (no server-side code may depend on a client).
        ("partlog.node", "partlog", "partlog.client"),
        # The WAL File Manager, a library and daemon over partlog.
        ("walmgr",),
        # walmgr's scan on Spark: imports walmgr, never the reverse.
        ("spark",),
        # Command lines, launchers and benchmarks.
        ("partlog.tools",),
        # Entry points over everything: ``python -m partlog`` and the two simulators.
        ("partlog.__main__", "simulations", "simulations.dst"),
    )
)

FLOOR_OF: dict[str, int] = {unit: i for i, floor in enumerate(FLOORS) for unit in floor}


def unit_of(module: str) -> str:
    """The unit a module belongs to (see the module docstring)."""
    parts = module.split(".")
    if parts[0] == "partlog":
        if len(parts) == 1:
            return "partlog"
        return f"partlog.{parts[1]}"
    if parts[0] == "simulations" and len(parts) >= 2 and parts[1] == "dst":
        return "simulations.dst"
    return parts[0]


@dataclass(frozen=True, slots=True)
class Violation:
    src_unit: str
    dst_unit: str
    src_module: str
    dst_module: str
    where: str  # file:line of the first such import

    def __str__(self) -> str:
        src_floor = FLOOR_OF.get(self.src_unit)
        dst_floor = FLOOR_OF.get(self.dst_unit)
        if src_floor is None or dst_floor is None:
            missing = self.src_unit if src_floor is None else self.dst_unit
            why = f"{missing} is on no floor (add it to tests/layers.py FLOORS)"
        elif src_floor == dst_floor:
            why = f"peers on floor {src_floor} must not import each other"
        else:
            why = f"floor {src_floor} imports floor {dst_floor}: upward"
        return f"{self.src_unit} -> {self.dst_unit}: {self.src_module} -> {self.dst_module} ({self.where}): {why}"


def violations(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[Violation]:
    """Every unit-to-unit arrow that breaks the contract (the first import of
    each (source module, target module) pair), sorted."""
    mods, graph = build_graph(root, list(packages))
    out: list[Violation] = []
    for src, targets in graph["typing"].items():
        src_unit = unit_of(src)
        for dst, line in targets.items():
            dst_unit = unit_of(dst)
            if src_unit == dst_unit:
                continue
            src_floor = FLOOR_OF.get(src_unit)
            dst_floor = FLOOR_OF.get(dst_unit)
            if src_floor is not None and dst_floor is not None and dst_floor < src_floor:
                continue
            where = f"{mods[src].relative_to(root)}:{line}"
            out.append(Violation(src_unit, dst_unit, src, dst, where))
    return sorted(out, key=lambda v: (v.src_unit, v.dst_unit, v.src_module, v.dst_module))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=".", help="the repository (default: .)")
    args = p.parse_args(argv)
    found = violations(Path(args.root).resolve())
    for v in found:
        print(v)
    print(f"{len(found)} arrow(s) break the layer contract")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
