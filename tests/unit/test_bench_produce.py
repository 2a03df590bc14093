"""partlog bench produce's cluster file is one a broker accepts.

Regression: it wrote no ``cluster_id``, and every broker it started refused
the file ("no cluster_id"), so the bench could not run at all."""

from __future__ import annotations

from pathlib import Path

from partlog.controller.cluster_meta import StaticMetadata
from partlog.tools.bench_produce import PARTITIONS, cluster_toml


def test_the_bench_cluster_file_loads_with_its_cluster_id(tmp_path: Path) -> None:
    meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"bench": PARTITIONS})
    path = tmp_path / "cluster.toml"
    path.write_text(cluster_toml(meta, 9092))
    loaded = StaticMetadata.from_toml(str(path))
    assert loaded.cluster_id == meta.cluster_id
    [topic] = loaded.topics()
    assert topic.topic_id == meta.topics()[0].topic_id
    assert topic.leaders == (1,) * PARTITIONS
    assert [(b.broker_id, b.az, b.port) for b in loaded.brokers()] == [(1, "az1", 9092)]
