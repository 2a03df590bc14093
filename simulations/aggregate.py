"""The aggregate mode: a scenario's steady-state rates from expectations,
with no events, for clusters too big to run event by event (1,000+
brokers, 100k partitions).

Same topology as the event-level simulator (Kafka's rack-aware
assignment from the seed, routing by the real ``StaticMetadata``), same
load model (Poisson sends of ``partitions_per_send`` distinct partitions,
uniform or Zipf), same WAL rotation rule and PUT budget, in expectation
(:mod:`simulations.rotation_model`).  From those:

* a broker b receives requests at rate R_b and bytes at Y_b; a file lasts
  D (the rotation rule's mean: the grace, the round, the budget's token
  spacing or the commit interval; buffer_bytes_max / Y_b if that is
  sooner), and the next one opens at the next request: files/s =
  1 / (D + 1/R_b) (size rotation: Y_b / buffer_bytes_max);
* a file holds a batch for leader L with probability
  1 - (1 - pi_L) exp(-c_L D), where c_L is the rate of b's requests that
  carry one of L's partitions and pi_L = c_L / R_b the chance that the
  file's first request does: one commit RPC per such leader (the
  coordinator design: one per file);
* from those, commit RPCs per file by kind (local, same AZ, cross AZ),
  distinct leaders per file, commit RPCs/s, PUT/s, GET/s and cost.

Latency and failures need the event-level mode.  ``compare`` runs both on
a scenario both can run and gives the relative difference of each figure.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from partlog.controller.cluster_meta import NO_LEADER
from simulations.cost import MonthlyCost, monthly_cost
from simulations.metrics import DesignResult
from simulations.rotation_model import mean_ms, rotation
from simulations.scenario import Design, GetMode, Routing, Scenario, ScenarioError
from simulations.topology import broker_azs, initial_metadata, topic_partitions


@dataclass(frozen=True, slots=True)
class AggregateResult:
    design: str
    routing: str
    files_per_s: float
    commit_local_mean: float
    commit_same_az_mean: float
    commit_cross_az_mean: float
    distinct_leaders_mean: float
    produce_requests_per_s: float
    network_commit_rpcs_per_s: float
    network_commit_rpcs_per_s_per_broker_max: float
    puts_per_s: float
    gets_per_s: float
    produce_bytes_per_s: float
    cost: MonthlyCost

    @property
    def commit_remote_mean(self) -> float:
        return self.commit_same_az_mean + self.commit_cross_az_mean


# (broker, leader) pairs whose commit chance the mode weighs: each costs a
# few microseconds, so this bounds one run to about a minute.
AGGREGATE_PAIRS_MAX = 20_000_000


def _send_probabilities(n: int, k: int, skew: float) -> list[float]:
    """P(partition p is in a send of k distinct partitions)."""
    if skew <= 0:
        return [k / n] * n
    w = [1.0 / (i + 1) ** skew for i in range(n)]
    total = sum(w)
    # Drawing k distinct by weight: P(p in send) ~ 1 - (1 - w_p)^k (the
    # event-level producer draws with replacement until k are distinct).
    return [1.0 - (1.0 - x / total) ** k for x in w]


def _none_of(n: int, k: int, m: int) -> float:
    """P(a uniform draw of k distinct of n partitions names none of m given
    ones): C(n - m, k) / C(n, k)."""
    if m <= 0:
        return 1.0
    if k > n - m:
        return 0.0
    out = 1.0
    for i in range(k):
        out *= (n - m - i) / (n - i)
    return out


def aggregate(scenario: Scenario, design: Design, routing: Routing, seed: int) -> AggregateResult:
    if design is Design.CLASSIC:
        raise ScenarioError(f"{scenario.source}: the aggregate mode has no classic design (no WAL files)")
    if any(p.records_per_s > 0 for p in scenario.producers):
        raise ScenarioError(f"{scenario.source}: the aggregate mode takes Poisson sends, not record producers")
    cluster = scenario.cluster
    azs = broker_azs(cluster)
    truth = initial_metadata(cluster, random.Random(f"{seed}/assignment"))
    tps = topic_partitions(cluster)
    n = len(tps)
    leader_of = [truth.leader_of(tp) for tp in tps]
    replicas = [truth.partition(tp).replicas for tp in tps]  # type: ignore[union-attr]
    producer_routing = Routing.ANY_BROKER if design is Design.COORDINATOR else routing

    # Per broker: request rate, bytes rate, and per leader the rate of its
    # requests that carry one of that leader's partitions (and partitions/s).
    req_rate: dict[int, float] = {b: 0.0 for b in azs}
    byte_rate: dict[int, float] = {b: 0.0 for b in azs}
    carry: dict[int, dict[int, float]] = {}
    produce_bytes = 0.0
    for spec in scenario.producers:
        lam = spec.count * spec.sends_per_s
        probs = _send_probabilities(n, spec.partitions_per_send, spec.skew)
        produce_bytes += lam * spec.partitions_per_send * spec.batch_bytes
        if producer_routing is Routing.ANY_BROKER:
            # (Every AZ has a broker: brokers_per_az >= 1, and no events here.)
            local = truth.brokers_in(spec.az)
            share = lam / len(local)
            # A request carries leader L when the send names one of L's partitions.
            miss: dict[int, float] = {}
            led: dict[int, int] = {}
            for p in range(n):
                lead = leader_of[p]
                if lead is not None and lead != NO_LEADER:
                    miss[lead] = miss.get(lead, 1.0) * (1.0 - probs[p])
                    led[lead] = led.get(lead, 0) + 1
            if spec.skew <= 0:
                miss = {lead: _none_of(n, spec.partitions_per_send, m) for lead, m in led.items()}
            # Every broker of the AZ gets the same row: share one dict among
            # them (memory in AZs x leaders, not brokers x leaders); a broker
            # that already has a row gets a merged copy, never a mutation.
            group_row = {lead: share * (1.0 - m) for lead, m in miss.items()}
            for b in local:
                req_rate[b] += share
                byte_rate[b] += share * spec.partitions_per_send * spec.batch_bytes
                old = carry.get(b)
                carry[b] = (
                    group_row if not old else {k: old.get(k, 0.0) + group_row.get(k, 0.0) for k in old | group_row}
                )
            continue
        # Representatives or leaders: partition p of this AZ's sends goes to d(p).
        rep = routing is Routing.AZ_REPRESENTATIVE
        dest = [truth.produce_target(tp, spec.az) if rep else truth.leader_of(tp) for tp in tps]
        miss_b: dict[int, float] = {}
        miss_bl: dict[tuple[int, int], float] = {}
        count_b: dict[int, int] = {}
        count_bl: dict[tuple[int, int], int] = {}
        for p in range(n):
            d, lead = dest[p], leader_of[p]
            if d is None or lead is None or lead == NO_LEADER:
                continue
            q = 1.0 - probs[p]
            miss_b[d] = miss_b.get(d, 1.0) * q
            miss_bl[(d, lead)] = miss_bl.get((d, lead), 1.0) * q
            count_b[d] = count_b.get(d, 0) + 1
            count_bl[(d, lead)] = count_bl.get((d, lead), 0) + 1
            byte_rate[d] += lam * probs[p] * spec.batch_bytes
        if spec.skew <= 0:
            # Uniform choice without replacement: exact.
            k = spec.partitions_per_send
            miss_b = {d: _none_of(n, k, m) for d, m in count_b.items()}
            miss_bl = {key: _none_of(n, k, m) for key, m in count_bl.items()}
        for d, m in miss_b.items():
            req_rate[d] += lam * (1.0 - m)
        for (d, lead), m in miss_bl.items():
            row = carry.setdefault(d, {})
            row[lead] = row.get(lead, 0.0) + lam * (1.0 - m)

    pairs = sum(len(row) for row in carry.values())
    if pairs > AGGREGATE_PAIRS_MAX:
        raise ScenarioError(
            f"{scenario.source}: {pairs:,} (broker, leader) pairs to weigh: the aggregate mode takes at most "
            f"{AGGREGATE_PAIRS_MAX:,} (fewer brokers, or routing by AZ representatives)"
        )
    readers = _readers_by_leader(replicas, leader_of, azs, scenario.object_store.get_mode)
    files_total = 0.0
    local_sum = same_sum = cross_sum = leaders_sum = 0.0
    received: dict[int, float] = {b: 0.0 for b in azs}
    gets = 0.0
    for b in azs:
        r, y = req_rate[b], byte_rate[b]
        if r <= 0:
            continue
        rot = rotation(scenario, r, y, _commit_ms(scenario, design, b, azs, carry.get(b, {})))
        duration, files = rot.open_s, rot.files_per_s
        files_total += files
        if design is Design.COORDINATOR:
            # One commit RPC per file to the coordinator, cross-AZ outside its AZ.
            if azs[b] == cluster.coordinator_az:
                same_sum += files
            else:
                cross_sum += files
        # Per file: P(it holds leader L) for each leader b's requests carry.
        for lead, c in carry.get(b, {}).items():
            pi = min(1.0, c / r)
            has = 1.0 - (1.0 - pi) * math.exp(-c * duration)
            leaders_sum += files * has
            if design is Design.PARTLOG:
                if lead == b:
                    local_sum += files * has
                elif azs[lead] == azs[b]:
                    same_sum += files * has
                    received[lead] += files * has
                else:
                    cross_sum += files * has
                    received[lead] += files * has
        gets += files * _gets_per_file(scenario, carry.get(b, {}), r, duration, readers)
    per_file = (lambda x: x / files_total) if files_total else (lambda x: 0.0)
    network = sum(received.values()) if design is Design.PARTLOG else same_sum + cross_sum
    puts = files_total
    return AggregateResult(
        design=design.value,
        routing=producer_routing.value,
        files_per_s=files_total,
        commit_local_mean=per_file(local_sum),
        commit_same_az_mean=per_file(same_sum),
        commit_cross_az_mean=per_file(cross_sum),
        distinct_leaders_mean=per_file(leaders_sum),
        produce_requests_per_s=sum(req_rate.values()),
        network_commit_rpcs_per_s=network,
        network_commit_rpcs_per_s_per_broker_max=max(received.values(), default=0.0)
        if design is Design.PARTLOG
        else 0.0,
        puts_per_s=puts,
        gets_per_s=gets,
        produce_bytes_per_s=produce_bytes,
        cost=monthly_cost(scenario, puts, gets, 0.0),
    )


def _commit_ms(scenario: Scenario, design: Design, b: int, azs: dict[int, str], carry: dict[int, float]) -> float:
    """Mean time from a file's upload to its last commit answered: one round
    trip to the farthest commit target, its group commit, and for acks=all
    the round trip to the farthest replica and its append (no queueing)."""
    net, commit = scenario.network, scenario.commit
    multi_az = len(scenario.cluster.azs) > 1
    if design is Design.COORDINATOR:
        cross = azs[b] != scenario.cluster.coordinator_az
        rtt = mean_ms(net.rtt_cross_az if cross else net.rtt_same_az)
        cost = commit.coordinator
        replicated = commit.coordinator_replication_factor > 1
    else:
        if any(azs[lead] != azs[b] for lead in carry):
            rtt = mean_ms(net.rtt_cross_az)
        elif any(lead != b for lead in carry):
            rtt = mean_ms(net.rtt_same_az)
        else:
            rtt = 0.0
        cost = commit.leader
        replicated = scenario.cluster.replication_factor > 1
    group = sum(cost.samples_ms) / len(cost.samples_ms) if cost.samples_ms else mean_ms(cost.fixed)
    ack = 0.0
    if replicated and any(p.acks_all for p in scenario.producers):
        ack = mean_ms(net.rtt_cross_az if multi_az else net.rtt_same_az) + mean_ms(commit.follower_apply)
    return rtt + group + ack


def _readers_by_leader(
    replicas: Sequence[tuple[int, ...]], leader_of: Sequence[int | None], azs: dict[int, str], mode: GetMode
) -> dict[int, frozenset[object]]:
    """Leader -> who reads a file holding its partitions: the replica
    brokers of its partitions (per-broker) or their AZs (per-AZ cache)."""
    out: dict[int, set[object]] = {}
    for p, lead in enumerate(leader_of):
        if lead is None or lead == NO_LEADER:
            continue
        keys = out.setdefault(lead, set())
        keys.update(replicas[p] if mode is GetMode.PER_BROKER else (azs[x] for x in replicas[p]))
    return {lead: frozenset(keys) for lead, keys in out.items()}


def _gets_per_file(
    scenario: Scenario, carry: dict[int, float], r: float, duration: float, readers: dict[int, frozenset[object]]
) -> float:
    """Expected GETs of one file of a broker whose requests carry leader L
    at rate ``carry[L]``: each reader (a broker or an AZ, by ``get_mode``)
    reads it once if the file holds any leader it has a replica of."""
    o = scenario.object_store
    if o.gets_per_file is not None:
        return o.gets_per_file
    if o.get_mode is GetMode.SHARED_CACHE:
        return 1.0
    miss: dict[object, float] = {}
    for lead, c in carry.items():
        pi = min(1.0, c / r)
        lack = (1.0 - pi) * math.exp(-c * duration)
        for key in readers.get(lead, ()):
            miss[key] = miss.get(key, 1.0) * lack
    return sum(1.0 - m for m in miss.values())


# Figures compared between the modes: (name, aggregate's, event-level's).
def compare_rows(a: AggregateResult, e: DesignResult) -> list[tuple[str, float, float]]:
    files = len(e.file_commits) / e.simulated_s if e.simulated_s else 0.0
    return [
        ("WAL files/s", a.files_per_s, files),
        ("commit RPCs/file: local", a.commit_local_mean, e.commit_local_mean),
        ("commit RPCs/file: same AZ", a.commit_same_az_mean, e.commit_same_az_mean),
        ("commit RPCs/file: cross AZ", a.commit_cross_az_mean, e.commit_cross_az_mean),
        ("distinct leaders/file", a.distinct_leaders_mean, e.distinct_leaders_mean),
        ("produce requests/s", a.produce_requests_per_s, e.produce_requests_per_s),
        ("network commit RPCs/s", a.network_commit_rpcs_per_s, e.network_commit_rpcs_per_s),
        ("object GET/s", a.gets_per_s, e.gets_per_s),
    ]


def to_json(a: AggregateResult) -> dict[str, object]:
    return {
        "design": a.design,
        "routing": a.routing,
        "wal_files_per_s": a.files_per_s,
        "commit_rpcs_per_file": {
            "local_mean": a.commit_local_mean,
            "same_az_mean": a.commit_same_az_mean,
            "cross_az_mean": a.commit_cross_az_mean,
            "remote_mean": a.commit_remote_mean,
            "distinct_leader_brokers_mean": a.distinct_leaders_mean,
        },
        "produce_requests_per_s": a.produce_requests_per_s,
        "network_commit_rpcs_per_s": a.network_commit_rpcs_per_s,
        "network_commit_rpcs_per_s_per_broker_max": a.network_commit_rpcs_per_s_per_broker_max,
        "object_requests_per_s": {"put": a.puts_per_s, "get": a.gets_per_s},
        "produce_bytes_per_s": a.produce_bytes_per_s,
        "monthly_cost_usd": a.cost.total_usd,
    }
