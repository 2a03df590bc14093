"""Producer-ID blocks (KIP-730): never an id twice, across brokers and
controller restarts; brokers prefetch at 90%."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from partlog.controller.producer_ids import ProducerIdManager, ProducerIdsExhaustedError
from partlog.kafka.producer_ids import ProducerIdAllocator, ProducerIdBlock

BROKERS = (1, 2, 3)


class IdsMachine(RuleBasedStateMachine):
    """Brokers ask a controller for blocks and hand out ids; the controller
    restarts now and then.  Every id handed out is unique."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="partlog-pids-")
        self.manager = ProducerIdManager(self.dir, block_size=10)
        self.allocators = {b: ProducerIdAllocator(b) for b in BROKERS}
        self.seen: set[int] = set()
        self.blocks: list[ProducerIdBlock] = []

    @rule(broker=st.sampled_from(BROKERS), count=st.integers(1, 15))
    def init_producer_ids(self, broker: int, count: int) -> None:
        alloc = self.allocators[broker]
        for _ in range(count):
            if alloc.wants_block():
                alloc.block_requested()
                block = self.manager.allocate(broker)
                self.blocks.append(block)
                alloc.add_block(block)
            pid = alloc.next_id()
            if pid is None:
                continue
            assert pid not in self.seen, f"producer id {pid} handed out twice"
            assert any(b.first_producer_id <= pid <= b.last_producer_id and b.assigned_broker_id == broker
                       for b in self.blocks)  # fmt: skip
            self.seen.add(pid)

    @rule()
    def restart_controller(self) -> None:
        self.manager.close()
        self.manager = ProducerIdManager(self.dir, block_size=10)

    @rule(broker=st.sampled_from(BROKERS))
    def restart_broker(self, broker: int) -> None:
        # A restarted broker forgets its blocks: the unused ids are lost, never reused.
        self.allocators[broker] = ProducerIdAllocator(broker)

    @invariant()
    def blocks_are_disjoint(self) -> None:
        firsts = sorted(b.first_producer_id for b in self.blocks)
        assert all(b - a >= 10 for a, b in itertools.pairwise(firsts))

    def teardown(self) -> None:
        self.manager.close()
        shutil.rmtree(self.dir, ignore_errors=True)


IdsMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_producer_ids_are_unique = IdsMachine.TestCase


def test_prefetch_at_ninety_percent(tmp_path: Path) -> None:
    with ProducerIdManager(tmp_path, block_size=10) as m:
        a = ProducerIdAllocator(7)
        assert a.wants_block() and a.next_id() is None
        a.block_requested()
        assert not a.wants_block()  # one request at a time
        a.add_block(m.allocate(7))
        ids = [a.next_id() for _ in range(9)]
        assert ids == list(range(9)) and a.wants_block()  # 9 of 10 used
        a.block_requested()
        a.add_block(m.allocate(7))
        assert [a.next_id() for _ in range(3)] == [9, 10, 11]  # current block, then the prefetched one
        with pytest.raises(ValueError, match="given to broker 7"):
            a.add_block(ProducerIdBlock(8, 100, 10))


def test_exhaustion_and_bad_config(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="block_size"):
        ProducerIdManager(tmp_path / "x", block_size=0)
    with pytest.raises(ValueError, match="prefetch_ratio"):
        ProducerIdAllocator(1, prefetch_ratio=0)
    with ProducerIdManager(tmp_path / "m", block_size=1 << 62) as m:
        m.allocate(1)
        m.allocate(1)
        with pytest.raises(ProducerIdsExhaustedError):
            m.allocate(1)
