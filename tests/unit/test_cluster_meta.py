"""Static cluster metadata and produce representatives."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partlog.controller.cluster_meta import MetadataError, StaticMetadata, topic_id_for
from partlog.kafka.records import TopicIdPartition

CLUSTER = uuid.UUID("6b1e7c52-93a4-4b0e-8f43-1f0b8f3f2a11")


@given(azs=st.integers(1, 5), per_az=st.integers(1, 8))
def test_balanced_cluster_costs_at_most_azs_minus_one_remote_commits(azs: int, per_az: int) -> None:
    meta = StaticMetadata.generate(azs=azs, brokers_per_az=per_az, topics={"t": azs * per_az * 3})
    [topic] = meta.topics()
    tps = [TopicIdPartition(topic.topic_id, p) for p in range(topic.num_partitions)]
    for b in meta.brokers():
        # Everything clients of b's AZ route to b: which leaders does a WAL file of b commit to?
        leaders = {meta.leader_of(tp) for tp in tps if meta.produce_target(tp, b.az) == b.broker_id}
        remote = leaders - {b.broker_id}
        assert len(remote) <= azs - 1
        for r in remote:
            assert r is not None
            rb = meta.broker(r)
            assert rb is not None and rb.az != b.az
        if per_az > 0 and azs > 1:
            assert len(remote) == azs - 1  # exactly one leader per other AZ


def test_representative_rules() -> None:
    meta = StaticMetadata.generate(azs=3, brokers_per_az=2, topics={"t": 6})
    assert meta.azs() == ["az1", "az2", "az3"] and meta.brokers_in("az1") == [1, 4]
    assert meta.representative(2, "az2") == 2  # leader in the client's AZ
    assert meta.representative(2, "az1") == 1  # rank 0 in az2 -> rank 0 in az1
    assert meta.representative(5, "az1") == 4
    assert meta.representative(5, "nowhere") == 5


def test_imbalanced_azs() -> None:
    meta = StaticMetadata.from_dict(
        {
            "cluster_id": str(CLUSTER),
            "brokers": [{"id": 1, "az": "a"}, {"id": 2, "az": "a"}, {"id": 3, "az": "a"}, {"id": 4, "az": "b"}],
            "topics": [{"name": "t", "leaders": [1, 2, 3, 4]}],
        }
    )
    # The lone broker of AZ b represents all three leaders of AZ a.
    assert {meta.representative(lead, "b") for lead in (1, 2, 3)} == {4}
    assert {meta.representative(4, "a")} == {1}


def test_toml_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "cluster.toml"
    head = f'cluster_id = "{CLUSTER}"\n'
    f.write_text(head + '[[brokers]]\nid = 1\naz = "a"\nport = 9000\n[[topics]]\nname = "t"\nleaders = [1, 1]\n')
    meta = StaticMetadata.from_toml(str(f))
    assert meta.broker(1).port == 9000  # type: ignore[union-attr]
    assert meta.leader_of(TopicIdPartition(meta.topics()[0].topic_id, 1)) == 1
    assert meta.leader_of(TopicIdPartition(meta.topics()[0].topic_id, 2)) is None
    f.write_text(head + '[[brokers]]\nid = 1\naz = "a"\n[[topics]]\nname = "t"\nleaders = [2]\n')
    with pytest.raises(MetadataError, match=r"cluster.toml: topic t: replicas \[2\] are not brokers"):
        StaticMetadata.from_toml(str(f))
    f.write_text(head + "[[brokers]]\nid = 1\n")
    with pytest.raises(MetadataError, match="bad broker or topic entry"):
        StaticMetadata.from_toml(str(f))
    f.write_text("not toml [")
    with pytest.raises(MetadataError, match=r"cluster\.toml"):
        StaticMetadata.from_toml(str(f))
    with pytest.raises(MetadataError, match="duplicate broker ids"):
        StaticMetadata.from_dict({"cluster_id": str(CLUSTER), "brokers": [{"id": 1, "az": "a"}, {"id": 1, "az": "b"}]})


def test_deleted_topics_are_listed_only_when_gone() -> None:
    """Regression: walmgr treated a topic missing from its view as deleted; only
    an explicit deletion counts now (a stale view must not delete anything)."""
    gone = uuid.uuid5(uuid.NAMESPACE_URL, "partlog-topic:gone")
    meta = StaticMetadata.from_dict(
        {
            "cluster_id": str(CLUSTER),
            "brokers": [{"id": 1, "az": "a"}],
            "topics": [{"name": "t", "leaders": [1]}],
            "deleted_topics": [str(gone), str(topic_id_for(CLUSTER, "t"))],
        }
    )
    assert meta.topic_deleted(gone)
    assert not meta.topic_deleted(topic_id_for(CLUSTER, "t"))  # a live topic is never deleted
    assert not meta.topic_deleted(uuid.uuid4())  # unknown is not deleted
    assert meta.with_ports({1: 5}).topic_deleted(gone)


def test_capabilities_are_named_protocols() -> None:
    """Callers ask isinstance(source, TopicAdmin) etc., not getattr by string:
    a static cluster file creates no topics, the controller's client does."""
    from partlog.controller.client import ControllerMetadata
    from partlog.controller.cluster_meta import CountsFailures, KnowsDeletedTopics, Startable, TopicAdmin
    from partlog.controller.etcd_meta import EtcdMetadata

    static = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
    assert not isinstance(static, TopicAdmin) and not isinstance(static, Startable)
    assert isinstance(static, KnowsDeletedTopics)
    client = ControllerMetadata("127.0.0.1", 1)
    assert isinstance(client, TopicAdmin) and isinstance(client, Startable) and isinstance(client, CountsFailures)
    assert isinstance(client, KnowsDeletedTopics)
    etcd = EtcdMetadata("etcd://127.0.0.1:1")
    assert isinstance(etcd, TopicAdmin) and isinstance(etcd, Startable) and isinstance(etcd, CountsFailures)
