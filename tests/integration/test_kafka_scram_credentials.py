"""SCRAM credentials in the embedded controller (KIP-554): the store's
checks, AlterUserScramCredentials and DescribeUserScramCredentials from
confluent-kafka's admin client on the PLAINTEXT listener, and the same
user then authenticating over SASL_PLAINTEXT with SCRAM and PLAIN."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partlog.controller.scram_store import ScramStore, Upsertion
from partlog.kafka.errors import Errors
from partlog.kafka.scram_credential import ScramCredential, salted_password
from tests.kafka_helpers import ClusterThread

confluent_kafka = pytest.importorskip("confluent_kafka")


def _up(user: str, mechanism: int = 2, iterations: int = 4096) -> Upsertion:
    name = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}.get(mechanism, "SCRAM-SHA-512")
    return Upsertion(user, mechanism, iterations, b"salt", salted_password(name, b"pw", b"salt", 4096))


def test_the_store_checks_as_kafkas_controller_and_keeps_no_password(tmp_path: Path) -> None:
    store = ScramStore(tmp_path / "scram")
    results = store.alter(
        [("ghost", 2)], [_up("a"), _up("a", 1), _up("b", 3), _up("c", 1, 100), _up(""), _up("d"), _up("d")]
    )
    assert [(r.user, r.error) for r in results] == [
        ("ghost", Errors.RESOURCE_NOT_FOUND),
        ("a", Errors.NONE),
        ("b", Errors.UNSUPPORTED_SASL_MECHANISM),
        ("c", Errors.UNACCEPTABLE_CREDENTIAL),
        ("", Errors.UNACCEPTABLE_CREDENTIAL),
        ("d", Errors.DUPLICATE_RESOURCE),
    ]
    cred = store.get("a", 2)
    assert cred == ScramCredential.from_password("SCRAM-SHA-512", "pw", b"salt", 4096)
    assert store.get("d", 2) is None and store.get("a", 1) is not None
    described = store.describe(None)
    assert [(d.user, d.infos) for d in described] == [("a", ((1, 4096), (2, 4096)))]
    assert [d.error for d in store.describe(["a", "zz"])] == [Errors.NONE, Errors.RESOURCE_NOT_FOUND]
    assert [r.error for r in store.alter([("a", 1)], [])] == [Errors.NONE]
    store.close()
    reopened = ScramStore(tmp_path / "scram")  # durable
    assert reopened.get("a", 1) is None and reopened.get("a", 2) == cred
    reopened.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterThread]:
    from partlog.kafka_front.listeners import ListenerSecurity

    security = ListenerSecurity(sasl_mechanisms=("SCRAM-SHA-256", "PLAIN"))  # credentials: the controller's
    c = ClusterThread(str(tmp_path_factory.mktemp("scram")), azs=1, brokers_per_az=1, partitions=1,
                      kafka_protocol="PLAINTEXT,SASL_PLAINTEXT", kafka_security=security)  # fmt: skip
    try:
        yield c
    finally:
        c.close()


def test_kip_554_from_confluent_then_the_user_authenticates(cluster: ClusterThread) -> None:
    import confluent_kafka.admin

    ck: Any = confluent_kafka.admin  # its stubs do not export the SCRAM types
    AdminClient, ScramCredentialInfo, ScramMechanism = ck.AdminClient, ck.ScramCredentialInfo, ck.ScramMechanism
    UserScramCredentialDeletion, UserScramCredentialUpsertion = (
        ck.UserScramCredentialDeletion,
        ck.UserScramCredentialUpsertion,
    )

    plain = {s.name: s.port for s in cluster.cluster.kafka_listeners[1]}
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{plain['PLAINTEXT']}"})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion("carol", info, b"carol-pw", b"salty")])
    for f in futures.values():
        f.result(10)
    asked: Any = admin.describe_user_scram_credentials(["carol"])
    described = asked["carol"].result(10)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 4096)
    ]

    def sasl_ok(mechanism: str, password: str) -> bool:
        conf: dict[str, Any] = {
            "bootstrap.servers": f"127.0.0.1:{plain['SASL_PLAINTEXT']}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism,
            "sasl.username": "carol",
            "sasl.password": password,
        }
        try:
            AdminClient(conf).list_topics(timeout=5)
        except confluent_kafka.KafkaException:
            return False
        return True

    assert sasl_ok("SCRAM-SHA-256", "carol-pw")
    assert sasl_ok("PLAIN", "carol-pw")  # checked against the SCRAM credential
    assert not sasl_ok("SCRAM-SHA-256", "nope")
    for f in admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)]
    ).values():
        f.result(10)
    assert not sasl_ok("SCRAM-SHA-256", "carol-pw")


@pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed")
def test_on_etcd_kip_554_and_partlog_users_then_sasl(tmp_path: Path) -> None:
    """A cluster whose metadata is on etcd keeps its users there: KIP-554
    from confluent's admin client and ``partlog users`` both reach them."""
    from confluent_kafka.admin import AdminClient

    from partlog.kafka_front.listeners import ListenerSecurity

    security = ListenerSecurity(sasl_mechanisms=("SCRAM-SHA-512",))
    c = ClusterThread(str(tmp_path / "c"), azs=1, brokers_per_az=1, partitions=1, metadata="etcd",
                      kafka_protocol="PLAINTEXT,SASL_PLAINTEXT", kafka_security=security)  # fmt: skip
    try:
        ports = {s.name: s.port for s in c.cluster.kafka_listeners[1]}
        added = subprocess.run(
            [sys.executable, "-m", "partlog", "users", "add", "dave", "--metadata", c.cluster.etcd_url,
             "--mechanism", "SCRAM-SHA-512"],
            input="dave-pw\n", capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        ck: Any = confluent_kafka.admin
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
        asked: Any = admin.describe_user_scram_credentials(["dave", "nobody"])
        assert [(i.mechanism, i.iterations) for i in asked["dave"].result(10).scram_credential_infos] == [
            (ck.ScramMechanism.SCRAM_SHA_512, 4096)
        ]
        with pytest.raises(confluent_kafka.KafkaException):
            asked["nobody"].result(10)
        conf: dict[str, Any] = {
            "bootstrap.servers": f"127.0.0.1:{ports['SASL_PLAINTEXT']}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "dave",
            "sasl.password": "dave-pw",
        }
        AdminClient(conf).list_topics(timeout=10)  # authenticated
    finally:
        c.close()
