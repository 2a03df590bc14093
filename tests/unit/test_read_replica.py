"""KIP-392's preferred read replica (partlog.kafka_front.read_replica)
against its rule, for any partition state and cluster shape."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from partlog.controller.cluster_meta import NO_LEADER, PartitionInfo
from partlog.kafka_front.read_replica import NO_PREFERENCE, preferred_read_replica


@st.composite
def states(draw: st.DrawFn) -> tuple[PartitionInfo, dict[int, str], str, int]:
    azs = {b: draw(st.sampled_from("abc")) for b in range(1, 7)}
    replicas = tuple(draw(st.permutations(list(azs)))[: draw(st.integers(1, 4))])
    isr = tuple(r for r in replicas if draw(st.booleans())) or replicas[:1]
    leader = draw(st.sampled_from([*isr, NO_LEADER]))
    gone = draw(st.sets(st.sampled_from(list(azs))))  # brokers the metadata no longer lists
    live = {b: az for b, az in azs.items() if b not in gone}
    client_az, me = draw(st.sampled_from("abcd")), draw(st.sampled_from(list(azs)))
    return PartitionInfo(leader, 0, replicas, isr), live, client_az, me


@given(states())
def test_the_preference_is_an_in_sync_replica_in_the_clients_az_or_none(
    s: tuple[PartitionInfo, dict[int, str], str, int],
) -> None:
    info, live, client_az, me = s
    got = preferred_read_replica(info, live.get, client_az, me)
    near = [r for r in info.isr if live.get(r) == client_az]
    if info.leader == NO_LEADER or not near or me in near:
        assert got == NO_PREFERENCE
    else:
        assert got in near and got != me
        assert got == (info.leader if info.leader in near else near[0])


def test_no_az_named_means_no_preference() -> None:
    info = PartitionInfo(1, 0, (1, 2), (1, 2))
    assert preferred_read_replica(info, {1: "a", 2: "b"}.get, None, 3) == NO_PREFERENCE
    assert preferred_read_replica(info, {1: "a", 2: "b"}.get, "", 3) == NO_PREFERENCE
    assert preferred_read_replica(info, {1: "a", 2: "b"}.get, "b", 3) == 2
    assert preferred_read_replica(None, {1: "a"}.get, "a", 3) == NO_PREFERENCE


def test_the_selector_is_on_unless_turned_off() -> None:
    """KIP-1163 sends diskless consumers to their AZ: on by default, for the
    listener and for `partlog broker`, and `--no-rack-aware-replica-selector`
    turns it off."""
    from partlog.kafka_front.apis import FrontConfig
    from partlog.kafka_front.fetch_api import FetchConfig
    from partlog.tools.cli import build_parser

    assert FrontConfig().rack_aware_replica_selector
    assert FetchConfig().rack_aware_replica_selector
    assert FrontConfig().kafka_configs()["replica.selector.class"] != ""
    parser = build_parser()
    base = ["broker", "--id", "1", "--data-dir", "/nonexistent", "--controller", "127.0.0.1:1"]
    assert parser.parse_args(base).rack_aware_replica_selector
    assert not parser.parse_args([*base, "--no-rack-aware-replica-selector"]).rack_aware_replica_selector
