"""Cluster metadata on etcd (issue 19) without etcd: the URL, and the view's
refusal of hostile values (the back end against a real etcd is in
tests/system/test_etcd_metadata.py)."""

from __future__ import annotations

import re
import uuid

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.controller.cluster_meta import NO_LEADER, BrokerInfo, MetadataError, PartitionInfo
from partlog.controller.etcd_controller import plan
from partlog.controller.etcd_layout import KV, EtcdView, Keys, enc_broker, enc_part, enc_topic, parse_etcd_url
from partlog.controller.etcd_url import EtcdAuth, EtcdTls
from partlog.kafka.records import TopicIdPartition


def test_url_forms() -> None:
    t = parse_etcd_url("etcd://127.0.0.1:2379,10.0.0.2:2380/clusters/a")
    assert t.endpoints == (("127.0.0.1", 2379), ("10.0.0.2", 2380)) and t.prefix == "/clusters/a"
    assert parse_etcd_url("etcd://h:1").prefix == "/partlog"
    assert parse_etcd_url(t.url()) == t
    for bad in ("etcd://", "etcd://h", "etcd://h:0", "etcd://h:70000", "etcd://h:1/", "etcd://h:1/a/../b",
                "etcd://h:1/a b", "http://h:1/x", "etcd://h:1,/x", "etcd://h:1//x"):  # fmt: skip
        with pytest.raises(MetadataError):
            parse_etcd_url(bad)


def test_url_tls_and_auth() -> None:
    """etcd+tls:// and the query (issue 29): TLS files and etcd's user with
    where its password is; never the password itself."""
    t = parse_etcd_url("etcd+tls://h:1,g:2/p?ca=/a%20b.pem&cert=/c&key=/k&user=u&password_env=X")
    assert t.tls == EtcdTls(ca="/a b.pem", cert="/c", key="/k") and t.auth == EtcdAuth("u", password_env="X")
    assert parse_etcd_url(t.url()) == t and t.url().startswith("etcd+tls://h:1,g:2/p?ca=/a%20b.pem&")
    assert parse_etcd_url("etcd+tls://h:1").tls == EtcdTls() and parse_etcd_url("etcd://h:1").tls is None
    plain = parse_etcd_url("etcd://h:1?user=u&password_file=/pw")
    assert (
        plain.tls is None and plain.auth == EtcdAuth("u", password_file="/pw") and parse_etcd_url(plain.url()) == plain
    )
    for bad, says in (
        ("etcd://h:1?ca=/x", "ca= needs etcd+tls://"),
        ("etcd+tls://h:1?cert=/c", "cert= and key= go together"),
        ("etcd+tls://h:1?user=u&password=p", "a password is never given in the URL"),
        ("etcd+tls://h:1?user=u", "user= needs exactly one of password_file= and password_env="),
        ("etcd+tls://h:1?user=u&password_file=/a&password_env=B", "exactly one"),
        ("etcd+tls://h:1?password_env=B", "need user="),
        ("etcd+tls://h:1?user=u&password_env=1B", "must name an environment variable"),
        ("etcd+tls://h:1?ca=/a&ca=/b", "ca= is given twice"),
        ("etcd+tls://h:1?ca=", "ca= needs a printable value"),
        ("etcd+tls://h:1?crt=/c", "unknown query key 'crt'"),
        ("etcds://h:1", "not an etcd URL"),
    ):
        with pytest.raises(MetadataError, match=re.escape(says)):
            parse_etcd_url(bad)


@given(st.text(max_size=300))
def test_url_fails_closed(text: str) -> None:
    """Any string is a target or a MetadataError naming it, never another exception."""
    for url in (text, "etcd://" + text, "etcd+tls://h:1/p?" + text):
        try:
            t = parse_etcd_url(url)
        except MetadataError as e:
            assert "metadata" in str(e)
        else:
            assert t.endpoints and t.prefix.startswith("/") and parse_etcd_url(t.url()) == t


KEYS = Keys("/c")


TID = uuid.UUID(int=0xABCDEF07)  # hex digits with letters: an upper-case spelling differs


def _good_state() -> list[KV]:
    reps = ((1, 2, 3), (2, 3, 1))
    return [
        KV(KEYS.cluster_id, str(uuid.UUID(int=1)).encode(), 1, 1),
        KV(KEYS.broker(1), enc_broker(BrokerInfo(1, "a", "h", 1), 5), 2, 2),
        KV(KEYS.topic("t"), enc_topic(TID, reps), 3, 3),
        KV(KEYS.part(TopicIdPartition(TID, 0)), enc_part(PartitionInfo(2, 1, reps[0], (2, 3), 2)), 4, 4),
    ]


_junk = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=6),
    max_leaves=30,
)


_small = st.integers(-2, 4)


# Near-valid states: the invariants, not the decoding, must refuse them.
_plausible = st.one_of(
    st.tuples(_small, _small, st.lists(_small, max_size=4), st.lists(_small, max_size=4), _small).map(list),
    st.tuples(st.just(TID.bytes), st.lists(st.lists(_small, max_size=4), max_size=3)).map(list),
    st.tuples(st.text(max_size=3), st.just("h"), _small, _small, _small).map(list),
)


_suffixes = st.sampled_from(
    [
        b"cluster_id",
        b"brokers/",
        b"incarnations/",
        b"topics/",
        b"parts/",
        b"deleted/",
        b"producer_ids",
        b"election/",
        b"",
    ]
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            _suffixes,
            st.binary(max_size=40) | st.sampled_from([b"1", b"t", TID.hex.encode() + b"/0", TID.hex.encode()]),
            st.none() | st.binary(max_size=64) | (_junk | _plausible).map(msgpack.packb),
        ),
        max_size=25,
    )
)
def test_view_refuses_hostile_values(events: list[tuple[bytes, bytes, bytes | None]]) -> None:
    """Whatever a writer puts under the prefix, the view never raises, keeps
    its invariants, and a refused key keeps its last good value."""
    view = EtcdView(KEYS)
    view.load(_good_state(), 4)
    for rev, (kind, tail, value) in enumerate(events, start=5):
        view.apply(KV(KEYS.root + kind + tail, value, rev, rev))
        s = view.snapshot()
        assert s.cluster_id == uuid.UUID(int=1)  # made once, never changed
        for t in s.topics:
            for p in t.partitions:
                assert p.isr and set(p.isr) <= set(p.replicas)
                assert p.leader == NO_LEADER or p.leader in p.isr
        plan(view, unclean=False, elect_preferred=True)  # decisions over any view are total


def test_view_loads_partitions_after_their_topic() -> None:
    """A range read is sorted by key ("parts/" before "topics/"): the
    partition's state must not be refused for arriving first."""
    view = EtcdView(KEYS)
    view.load(sorted(_good_state(), key=lambda kv: kv.key), 4)
    assert view.refused == 0
    assert view.partition(TopicIdPartition(TID, 0)) == PartitionInfo(2, 1, (1, 2, 3), (2, 3), 2)


def test_cli_refuses_bad_etcd_urls(capsys: pytest.CaptureFixture[str]) -> None:
    from partlog.tools.cli import main

    assert main(["broker", "--id", "1", "--metadata", "etcd://nohost", "--az", "a", "--port", "1",
                 "--kafka-port", "2", "--data-dir", "/tmp/x"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--metadata" in err and "HOST:PORT" in err
    assert main(["broker", "--id", "1", "--metadata", "etcd://h:1", "--controller", "h:1", "--data-dir", "/tmp/x"]) == 2
    assert "exactly one of" in capsys.readouterr().err
    assert main(["topics", "create", "t", "--partitions", "1", "--metadata", "etcd://h:1/a/../b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ". or .." in err
    assert main(["cluster", "--metadata", "etcd://h:99999"]) == 2
    assert "endpoint" in capsys.readouterr().err


def test_view_refuses_other_spellings_of_a_key() -> None:
    """``03``, ``²``, an upper-case topic id: each would name the same
    partition or broker as the key we write, and writes comparing the real
    key could then never succeed (and ``²`` crashed the watch)."""
    view = EtcdView(KEYS)
    view.load(_good_state(), 4)
    before = view.partition(TopicIdPartition(TID, 0))
    bad_part = enc_part(PartitionInfo(1, 9, (1, 2, 3), (1,), 9))
    for key in (
        KEYS.parts + f"{TID.hex}/00".encode(),
        KEYS.parts + f"{TID.hex}/²".encode(),
        KEYS.parts + f"{TID.hex.upper()}/0".encode(),
        KEYS.parts + f"{{{TID}}}/0".encode(),
        KEYS.brokers + "٣".encode(),
        KEYS.brokers + b"01",
    ):
        view.apply(KV(key, bad_part, 9, 9))
    assert view.partition(TopicIdPartition(TID, 0)) == before
    assert view.refused == 6 and set(view.brokers) == {1}


def test_view_keeps_what_must_not_go_back() -> None:
    """A partition key deleted while its topic lives would bring the
    partition back as created (every replica in the ISR); a counter deleted
    or lowered would repeat producer ids; a changed cluster id freezes the
    view; a reload keeps all of that and refuses an older revision."""
    view = EtcdView(KEYS)
    state = [*_good_state(), KV(KEYS.producer_ids, msgpack.packb(5000), 5, 5)]
    view.load(state, 5)
    tp = TopicIdPartition(TID, 0)
    shrunk = view.partition(tp)
    view.apply(KV(KEYS.part(tp), None, 0, 6))
    assert view.partition(tp) == shrunk
    view.apply(KV(KEYS.producer_ids, None, 0, 7))
    view.apply(KV(KEYS.producer_ids, msgpack.packb(1000), 8, 8))
    assert view.producer_ids_next == 5000
    with pytest.raises(MetadataError, match="older than"):
        view.load(state, 4)
    view.load([kv for kv in state if kv.key != KEYS.producer_ids], 9)  # e.g. after a compaction
    assert view.producer_ids_next == 5000 and view.cluster_id == uuid.UUID(int=1)
    view.apply(KV(KEYS.cluster_id, str(uuid.UUID(int=2)).encode(), 10, 10))
    assert view.frozen
    view.apply(KV(KEYS.broker(7), enc_broker(BrokerInfo(7, "a", "h", 1), 5), 11, 11))
    assert 7 not in view.brokers and view.cluster_id == uuid.UUID(int=1)


def test_a_plan_elects_first_and_shrinks_isrs_in_the_next_pass() -> None:
    """A dead broker that led some partitions and followed others: the
    first plan holds only the elections (written and seen first), the next
    one the ISR shrinks of the partitions it only followed."""
    view = EtcdView(KEYS)
    reps = [(1, 2, 3), (2, 3, 1), (3, 1, 2), (1, 3, 2)]
    kvs = [KV(KEYS.cluster_id, str(uuid.UUID(int=1)).encode(), 1, 1), KV(KEYS.topic("t"), enc_topic(TID, reps), 2, 2)]
    for b in (1, 2, 3):
        kvs.append(KV(KEYS.broker(b), enc_broker(BrokerInfo(b, "a", "h", b), 7), 10 + b, 10 + b))
        kvs.append(KV(KEYS.incarnation(b), msgpack.packb(10 + b), 20 + b, 20 + b))
    view.load(kvs, 30)
    kvs = [kv for kv in kvs if kv.key not in (KEYS.broker(1), KEYS.incarnation(1))]  # broker 1 died
    view.load(kvs, 31)
    first = plan(view, unclean=False, elect_preferred=False)
    assert sorted(ch.tp.partition for ch in first.changes) == [0, 3] and all(ch.election for ch in first.changes)
    assert not first.accept
    whole = plan(view, unclean=False, elect_preferred=False, leaderless_first=False)
    assert sorted(ch.tp.partition for ch in whole.changes) == [0, 1, 2, 3]
    for ch in first.changes:
        view.set_partition(ch.tp, ch.new, 40 + ch.tp.partition)
    second = plan(view, unclean=False, elect_preferred=False)
    assert sorted(ch.tp.partition for ch in second.changes) == [1, 2] and not any(ch.election for ch in second.changes)
