"""Cluster identity in the state itself (design.md, "Deletion safety", step
0): the controller's state, a broker's store and a cluster file each carry
one cluster id, and refuse another (the servers' and walmgr's checks are in
tests/integration/test_cluster_identity.py)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from partlog.controller.cluster_meta import (
    MetadataError,
    StaticMetadata,
    TopicInfo,
    topic_id_for,
)
from partlog.controller.core import Controller, ControllerConfig
from partlog.controller.state_store import ControllerStateError
from partlog.store import MetadataStore, StoreError

A = uuid.UUID("aaaaaaaa-0000-4000-8000-00000000000a")


B = uuid.UUID("bbbbbbbb-0000-4000-8000-00000000000b")


def test_controller_state_has_a_random_cluster_id_and_random_topic_ids(tmp_path: Path) -> None:
    with Controller(ControllerConfig(str(tmp_path / "c1")), now_ms=0) as c1:
        first = c1.cluster_id
        c1.register_broker(1, "az1", "127.0.0.1", 1, 0)
        t1 = c1.create_topic("orders", 1, 1)
        assert isinstance(t1, TopicInfo) and c1.snapshot().cluster_id == first
    with Controller(ControllerConfig(str(tmp_path / "c1")), now_ms=0) as again:
        assert again.cluster_id == first  # kept with the state
    with pytest.raises(ControllerStateError, match=str(B)):
        Controller(ControllerConfig(str(tmp_path / "c1"), cluster_id=B), now_ms=0)
    # Another cluster, the same topic name: another cluster id and topic id.
    with Controller(ControllerConfig(str(tmp_path / "c2")), now_ms=0) as c2:
        c2.register_broker(1, "az1", "127.0.0.1", 1, 0)
        t2 = c2.create_topic("orders", 1, 1)
        assert isinstance(t2, TopicInfo)
        assert c2.cluster_id != first and t2.topic_id != t1.topic_id
    with Controller(ControllerConfig(str(tmp_path / "c3"), cluster_id=B), now_ms=0) as c3:
        assert c3.cluster_id == B


def test_store_is_bound_to_one_cluster(tmp_path: Path) -> None:
    with MetadataStore.open(tmp_path / "s", sync=False, cluster_id=A) as s:
        assert s.cluster_id == A
        s.bind_cluster(A)  # again: fine
        with pytest.raises(StoreError, match=f"belongs to cluster {A}, not to cluster {B}"):
            s.bind_cluster(B)
    with pytest.raises(StoreError, match=str(B)):
        MetadataStore.open(tmp_path / "s", sync=False, cluster_id=B)
    with MetadataStore.open(tmp_path / "s", readonly=True) as ro:
        assert ro.cluster_id == A


def test_cluster_file_needs_a_cluster_id_and_derives_topic_ids_from_it(tmp_path: Path) -> None:
    doc: dict[str, Any] = {"brokers": [{"id": 1, "az": "a"}], "topics": [{"name": "t", "leaders": [1]}]}
    with pytest.raises(MetadataError, match="no cluster_id"):
        StaticMetadata.from_dict(doc, where="c.toml")
    with pytest.raises(MetadataError, match="not a UUID"):
        StaticMetadata.from_dict({**doc, "cluster_id": "nope"}, where="c.toml")
    a = StaticMetadata.from_dict({**doc, "cluster_id": str(A)})
    b = StaticMetadata.from_dict({**doc, "cluster_id": str(B)})
    assert a.cluster_id == A and b.cluster_id == B
    assert a.topics()[0].topic_id == topic_id_for(A, "t") != b.topics()[0].topic_id
    explicit = {**doc, "topics": [{"name": "t", "id": str(uuid.UUID(int=7)), "leaders": [1]}]}
    assert StaticMetadata.from_dict({**explicit, "cluster_id": str(B)}).topics()[0].topic_id == uuid.UUID(int=7)
