"""``partlog bench kafka --security sasl_ssl`` runs end to end (numbers not judged: no timing asserts)."""

from __future__ import annotations

import io
import shutil

import pytest

from partlog.tools import bench_kafka_security


@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI needed for the certificates")
def test_the_sasl_ssl_bench_produces_over_both_listeners_and_measures_authorization() -> None:
    pytest.importorskip("confluent_kafka")
    r = bench_kafka_security.run(seconds=1.0, value_bytes=100, partitions=1, linger_ms=5, commit_interval_ms=50)
    assert r["plaintext"]["records"] > 0 and r["sasl_ssl"]["records"] > 0
    assert r["plaintext"]["errors"] == 0 and r["sasl_ssl"]["errors"] == 0
    # Both latency sides produced as the SCRAM user, the second through the authorizer's ACLs.
    for side in ("no_authorizer", "authorizer"):
        lat = r["latency"][side]
        assert lat["records"] > 0 and lat["errors"] == 0
        assert set(lat) == {"records", "errors", "p50", "p99"}
    micro = r["authorizer_us"]
    assert micro["acls"] == bench_kafka_security.MICRO_ACLS
    assert set(micro["produce_write_topic"]) == {"p50", "p99"}
    assert {"e2e_p99_added_ms", "authz_p99_added_ms"} <= set(r)
    assert set(r["verdicts"]) == {
        "SASL_SSL >= 0.8 x PLAINTEXT MiB/s",
        "p99 added by authorization <= 1 ms (authorizer decision p99)",
    }
    out = io.StringIO()
    bench_kafka_security.print_report(r, out)
    text = out.getvalue()
    for line in ("no authorizer", "--authorizer", "difference", "authorizer decisions among 1000 ACLs"):
        assert line in text


def test_the_bench_users_acls_are_exactly_what_an_idempotent_producer_needs() -> None:
    from partlog.acl import AclOperation, ResourceType
    from partlog.acl.authorizer import Authorizer, AuthorizerConfig

    a = Authorizer(AuthorizerConfig(), bench_kafka_security.micro_acls())
    p, host, topic = bench_kafka_security.PRINCIPAL, "127.0.0.1", "bench"
    assert a.authorize(p, host, AclOperation.WRITE, ResourceType.TOPIC, topic)
    assert a.authorize(p, host, AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
    assert a.authorize(p, host, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, "kafka-cluster")
    assert not a.authorize(p, host, AclOperation.READ, ResourceType.TOPIC, topic)
    assert not a.authorize(p, host, AclOperation.WRITE, ResourceType.TOPIC, "topic-0")
