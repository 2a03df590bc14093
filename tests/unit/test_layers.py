"""Layers only point down (tests/layers.py): no package imports one on its
own floor or above, typing-only and lazy imports included.

How to see it fail: add ``from partlog.broker.server import Broker`` under
``if TYPE_CHECKING:`` in any ``partlog/store`` module and run this file; the
first test names the arrow, its file and line.  The second test does the
same to a small tree in a temporary directory, so the checker itself is
shown to refuse an upward arrow, a peer arrow and a package on no floor."""

from __future__ import annotations

from pathlib import Path

from tests.layers import FLOORS, violations
from tests.paths import REPO


def test_every_import_points_down() -> None:
    found = [str(v) for v in violations(REPO)]
    assert not found, "imports that break the layer contract (tests/layers.py):\n" + "\n".join(found)


def test_every_unit_has_one_floor() -> None:
    units = [u for floor in FLOORS for u in floor]
    assert len(units) == len(set(units)), "a unit is on two floors"


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_contract_refuses_upward_peer_and_unplaced_arrows(tmp_path: Path) -> None:
    for pkg in ("partlog", "partlog/kafka", "partlog/store", "partlog/produce", "partlog/broker", "walmgr"):
        _write(tmp_path, f"{pkg}/__init__.py", "")
    _write(tmp_path, "partlog/kafka/records.py", "X = 1\n")
    # Downward arrows: allowed.
    _write(tmp_path, "partlog/store/log.py", "from partlog.kafka.records import X\n")
    _write(tmp_path, "walmgr/daemon.py", "from partlog.store.log import X\n")
    assert violations(tmp_path) == []
    # Upward, and only for the type checker: still refused.
    _write(
        tmp_path,
        "partlog/kafka/epochs.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from partlog.broker.server import Broker\n",
    )
    _write(tmp_path, "partlog/broker/server.py", "class Broker: ...\n")
    # A peer on the same floor, imported lazily inside a function: refused.
    _write(tmp_path, "partlog/produce/pipeline.py", "def f() -> None:\n    from partlog.store.log import X\n")
    # A package on no floor: refused until it is given one.
    _write(tmp_path, "partlog/newthing/__init__.py", "from partlog.kafka.records import X\n")
    found = {(v.src_module, v.dst_module): str(v) for v in violations(tmp_path)}
    assert set(found) == {
        ("partlog.kafka.epochs", "partlog.broker.server"),
        ("partlog.produce.pipeline", "partlog.store.log"),
        ("partlog.newthing", "partlog.kafka.records"),
    }, found
    assert "upward" in found[("partlog.kafka.epochs", "partlog.broker.server")]
    assert "peers on floor" in found[("partlog.produce.pipeline", "partlog.store.log")]
    assert "on no floor" in found[("partlog.newthing", "partlog.kafka.records")]
