"""``python -m simulations.dst``: deterministic simulation of the whole system.

    python -m simulations.dst fuzz [--seeds N | --hours H] [--first-seed S] [--inject NAME] [--txn] [--tiering]
                                   [--create-partitions] [--reassign]
    python -m simulations.dst replay SEED [--inject NAME] [--events] [--txn] [--tiering] [--create-partitions]
                                          [--reassign]
    python -m simulations.dst --list-injections

Each seed's line (and ``--json``'s ``digests``) ends in its digest: a hash
of the run's events, acknowledgements and loop steps, the same for every
replay of the seed on the same code, so a change meant to keep behaviour
shows it kept it.  Exit status 1 when an invariant broke (the failing
seed's replay command is printed), 0 otherwise, 2 for usage errors.  The
run re-executes itself with ``PYTHONHASHSEED=0``: set iteration order of
strings must not change between a run and its replay.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections import Counter
from typing import Any

from partlog import injected_bugs
from partlog.util.cli_errors import OneLineArgumentParser, run_cli, take_debug_flag
from simulations.dst.config import Faults, Result, Shape
from simulations.dst.runtime import LIVELOCK_STEPS_MAX
from simulations.dst.shrink import shrink
from simulations.dst.world import run

# A fuzz run's defaults: a 6-broker, 12-partition cluster in 3 AZs, 20 s of
# faults (frequent: crashes every few seconds), then 10 s to heal.
FUZZ_SHAPE = Shape(duration_s=20.0, settle_s=10.0, rate_per_producer=20.0, rate_per_plain_producer=10.0)
# --txn: the same, with three transactional producers (one per AZ), their
# coordinator's stand-in and a read_committed reader (simulations/dst/txn.py),
# and two consume-transform-produce transformers (simulations/dst/ctp.py).
FUZZ_TXN_SHAPE = dataclasses.replace(FUZZ_SHAPE, txn_producers=3, txn_transformers=2)
# --tiering: the topic tiers its committed log into segments (segment.ms 1 s
# of virtual time), under the same faults (with --txn too: both shapes).
FUZZ_FAULTS = Faults(
    broker_crashes_per_min=6.0,
    az_partitions_per_min=3.0,
    controller_crashes_per_min=1.5,
    walmgr_crashes_per_min=3.0,
    producer_restarts_per_min=3.0,
    controller_isolations_per_min=2.0,
    walmgr_isolations_per_min=3.0,
    delete_records_per_min=6.0,
    retention_changes_per_min=3.0,
)

# --create-partitions: an operator grows the topic this often, under the same faults.
CREATE_PARTITIONS_PER_MIN = 6.0
# --reassign: an operator moves a partition (or cancels a move) this often.
REASSIGN_PER_MIN = 12.0

# --txn: the transaction faults beside those (a coordinator crash between
# Prepare and the markers, lost markers, a leader crash with a transaction
# open, a transformer's crash).
FUZZ_TXN_FAULTS = dataclasses.replace(
    FUZZ_FAULTS,
    txn_coordinator_crashes_per_min=4.0,
    txn_marker_losses_per_min=4.0,
    txn_leader_crashes_per_min=3.0,
    transformer_crashes_per_min=4.0,
)


def _shape(args: argparse.Namespace) -> Shape:
    shape = FUZZ_TXN_SHAPE if args.txn else FUZZ_SHAPE
    return dataclasses.replace(shape, tiering=True) if args.tiering else shape


# --tiering: beside those, a leader's answers to one follower late past the
# answer age limit now and then (the release grace's case).
TIERING_SLOW_REPLIES_PER_MIN = 6.0


def _faults(args: argparse.Namespace) -> Faults:
    faults = FUZZ_TXN_FAULTS if args.txn else FUZZ_FAULTS
    if getattr(args, "tiering", False):
        faults = dataclasses.replace(faults, slow_replies_per_min=TIERING_SLOW_REPLIES_PER_MIN)
    if getattr(args, "create_partitions", False):  # bench has no such flag
        faults = dataclasses.replace(faults, create_partitions_per_min=CREATE_PARTITIONS_PER_MIN)
    if getattr(args, "reassign", False):
        faults = dataclasses.replace(faults, reassign_per_min=REASSIGN_PER_MIN)
    return faults


def _replay_command(
    seed: int,
    inject: list[str],
    only_faults: list[int] | None = None,
    txn: bool = False,
    tiering: bool = False,
    create_partitions: bool = False,
    reassign: bool = False,
) -> str:
    extra = (" --txn" if txn else "") + (" --tiering" if tiering else "")
    extra += (" --create-partitions" if create_partitions else "") + (" --reassign" if reassign else "")
    extra += "".join(f" --inject {name}" for name in inject)
    if only_faults is not None:
        extra += f" --only-faults {','.join(map(str, only_faults)) or 'none'}"
    return f"python -m simulations.dst replay {seed}{extra}"


def _replay(args: argparse.Namespace, seed: int, only_faults: list[int] | None = None) -> str:
    flags = (args.txn, args.tiering, args.create_partitions, args.reassign)
    return _replay_command(seed, args.inject, only_faults, *flags)


def _line(r: Result) -> str:
    status = "ok" if r.ok else "FAILED"
    return (
        f"seed {r.seed}: {status}; {r.simulated_s:.0f} simulated s in {r.wall_s:.1f} s "
        f"({r.simulated_s / max(r.wall_s, 1e-9):.1f}x), {r.steps:,} events, {r.acked:,} records acknowledged "
        f"with acks=all, {r.acked_acks1:,} with acks=1 ({r.lost_acks1} lost in failovers), "
        f"faults {sum(r.faults.values())}" + (f"; tiering: {_tiering(r)}" if r.tiering else "")
    )


def _tiering(r: Result) -> str:
    return ", ".join(f"{v} {k}" for k, v in r.tiering.items())


def cmd_fuzz(args: argparse.Namespace) -> int:
    injected_bugs.enable(args.inject)
    deadline = time.monotonic() + args.hours * 3600 if args.hours else None
    seeds_run = 0
    sim_s = wall_s = 0.0
    events = busiest = 0
    acks1 = [0, 0]  # acknowledged, lost
    faults: Counter[str] = Counter()
    tiering: Counter[str] = Counter()
    failed: list[Result] = []
    # Seed -> digest: "a change kept behaviour" is then a diff of the
    # digests of two runs, before and after it.
    digests: dict[int, str] = {}
    seed = args.first_seed
    while True:
        if deadline is None and seeds_run >= args.seeds:
            break
        if deadline is not None and time.monotonic() > deadline:
            break
        r = run(seed, _shape(args), _faults(args))
        seeds_run += 1
        sim_s += r.simulated_s
        wall_s += r.wall_s
        events += r.steps
        busiest = max(busiest, r.busiest_second_steps)
        acks1[0] += r.acked_acks1
        acks1[1] += r.lost_acks1
        faults.update(r.faults)
        tiering.update(r.tiering)
        digests[seed] = r.digest
        if not args.json:
            print(f"{_line(r)}; digest {r.digest}", flush=True)
        if not r.ok:
            failed.append(r)
            if not args.json:
                for v in r.violations[:3]:
                    print(f"  {v}")
                print(f"  replay: {_replay(args, seed)}", flush=True)
                if args.shrink_runs > 0:
                    _print_shrunk(r, args)
            if args.stop_at_first:
                break
        seed += 1
    summary: dict[str, Any] = {
        "seeds": seeds_run,
        "failed_seeds": [r.seed for r in failed],
        "injected": list(args.inject),
        "simulated_hours": sim_s / 3600,
        "wall_s": wall_s,
        "simulated_s_per_wall_s": sim_s / wall_s if wall_s else 0.0,
        "events": events,
        "events_per_wall_s": events / wall_s if wall_s else 0.0,
        "busiest_virtual_second_events": busiest,
        "faults": dict(sorted(faults.items())),
        "acks1_acknowledged": acks1[0],
        "acks1_lost": acks1[1],
        "invariants": _invariants(args),
        **({"tiering": dict(tiering)} if args.tiering else {}),
        **({"reassignments": _moves(faults)} if args.reassign else {}),
        "digests": {str(seed_): digest for seed_, digest in digests.items()},
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print()
        print(f"seeds run            {seeds_run} (failed: {summary['failed_seeds'] or 'none'})")
        print(f"simulated            {sim_s / 3600:.3f} h in {wall_s:.0f} s ({summary['simulated_s_per_wall_s']:.1f}x)")
        print(
            f"events               {events:,} ({summary['events_per_wall_s']:,.0f}/s; "
            f"busiest virtual second {busiest:,}, livelock past {LIVELOCK_STEPS_MAX:,})"
        )
        print(f"acks=1 records       {acks1[0]:,} acknowledged, {acks1[1]:,} lost in failovers (allowed)")
        print("faults injected      " + (", ".join(f"{k} {v}" for k, v in sorted(faults.items())) or "none"))
        if args.tiering and tiering:
            print("tiering              " + ", ".join(f"{v:,} {k}" for k, v in tiering.items()))
        if args.reassign:
            print("reassignments        " + ", ".join(f"{v} {k}" for k, v in _moves(faults).items()))
        print("invariants checked   " + "; ".join(_invariants(args)))
        if args.inject:
            print(f"injected bugs        {', '.join(args.inject)}")
    return 1 if failed else 0


def _moves(faults: Counter[str]) -> dict[str, int]:
    """The moves of --reassign: started, completed, cancelled."""
    return {what: faults[f"reassign_{what}"] for what in ("started", "completed", "cancelled")}


def _print_shrunk(first: Result, args: argparse.Namespace) -> None:
    """Drop faults while the seed still fails; print the replay command
    and the minimised trace."""
    best, runs = shrink(
        first, _shape(args), _faults(args), runs_max=args.shrink_runs, progress=lambda line: print(line, flush=True)
    )
    kept = best.fault_numbers
    print(f"  minimised ({runs} runs): {len(kept)} of {len(first.fault_numbers)} faults still fail:")
    print(f"    {best.violations[0]}")
    print(f"  replay: {_replay(args, first.seed, kept)}")
    print("  trace:")
    for t, what in best.events:
        if not what.startswith("deleted ") and not what.endswith(": skipped"):
            print(f"    {t:9.3f} s  {what}")


def _fault_list(text: str) -> frozenset[int]:
    if text == "none":
        return frozenset()
    try:
        numbers = frozenset(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected fault numbers like 3,7,12 (or none), got {text!r}") from None
    if any(n < 0 for n in numbers):
        raise argparse.ArgumentTypeError(f"fault numbers are >= 0, got {text!r}")
    return numbers


# The speed target: simulated seconds per wall second for a
# 6-broker, 12-partition cluster under load.
SPEED_TARGET = 200.0


def cmd_bench(args: argparse.Namespace) -> int:
    """Simulated seconds per wall second and events per second, for the
    fuzz cluster idle, under its load, and under load with its faults."""
    d = args.duration_s
    cases = [
        (
            "idle (no producers)",
            Shape(duration_s=d, settle_s=5.0, producers_per_az=0, plain_producers=0, acks1_producers=0),
            Faults.none(),
        ),
        ("under load, no faults", dataclasses.replace(FUZZ_SHAPE, duration_s=d), Faults.none()),
        ("under load, fuzz faults", dataclasses.replace(FUZZ_SHAPE, duration_s=d), FUZZ_FAULTS),
    ]
    rows = []
    for name, shape, faults in cases:
        r = run(args.seed, shape, faults)
        speed = r.simulated_s / r.wall_s
        rows.append(
            {
                "case": name,
                "ok": r.ok,
                "simulated_s": round(r.simulated_s, 1),
                "wall_s": round(r.wall_s, 2),
                "simulated_s_per_wall_s": round(speed, 2),
                "events_per_wall_s": round(r.steps / r.wall_s),
                "ratio_to_target": round(speed / SPEED_TARGET, 4),
            }
        )
    if args.json:
        print(json.dumps({"target_simulated_s_per_wall_s": SPEED_TARGET, "cases": rows}))
        return 0
    print(f"{'case':26} {'simulated s':>11} {'wall s':>8} {'sim s / wall s':>15} {'events/s':>10} {'of target':>10}")
    for row in rows:
        print(
            f"{row['case']:26} {row['simulated_s']:>11} {row['wall_s']:>8} {row['simulated_s_per_wall_s']:>15} "
            f"{row['events_per_wall_s']:>10,} {row['ratio_to_target']:>10.3f}"
        )
    print(f"target: {SPEED_TARGET:.0f} simulated s per wall s under load (6 brokers, 12 partitions)")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    injected_bugs.enable(args.inject)
    r = run(args.seed, _shape(args), _faults(args), args.only_faults)
    if args.json:
        print(json.dumps({**r.__dict__, "events": r.events if args.events else len(r.events)}, default=str))
        return 0 if r.ok else 1
    print(_line(r))
    print(f"digest {r.digest} (the same for every replay of this seed)")
    for v in r.violations:
        print(f"  violation: {v}")
    if args.events:
        for t, what in r.events:
            print(f"  {t:10.3f} s  {what}")
    for e in r.errors_logged[:20]:
        print(f"  logged: {e}")
    return 0 if r.ok else 1


INVARIANTS = [
    "acks=all records read back at their offset (idempotent: once, in send order)",
    "no offset acknowledged twice with acks=all",
    "every record read was sent; no gaps in offsets",
    "no WAL object deleted while its partition's leader or an ISR member references it",
    "no reference to a deleted object appears afterwards (on any broker whose log lacked it then)",
    "file-reference index = recount of the log",
    "controller epochs monotonic, one leader per epoch",
    "leader HWM monotonic within an epoch and never past an ISR member's log end",
    "producers deliver what they hold once faults stop",
    "orphans past the gate deleted once faults stop",
    "no task spins without waiting, nor retries without progress (livelock)",
]


def _invariants(args: argparse.Namespace) -> list[str]:
    return (
        INVARIANTS
        + (TXN_INVARIANTS if args.txn else [])
        + (TIERING_INVARIANTS if args.tiering else [])
        + (REASSIGN_INVARIANTS if args.reassign else [])
    )


# With --reassign, beside those.
REASSIGN_INVARIANTS = [
    "a broker out of a partition's replicas (by the metadata it applied) holds no log of it",
    "every move completed or cancelled once faults stop",
]


# With --tiering, beside those.
TIERING_INVARIANTS = [
    "no tiered segment deleted a leader may still swap in, nor an index before its .log; every segment row names "
    "an uploaded .log of its size",
    "each replica's reads through its segment references return its leader's bytes",
    "ISR members hold the leader's segment rows below its HWM (past any row of a former leader)",
]
# With --txn, beside those.
TXN_INVARIANTS = [
    "no replica's LSO passes its HWM or an undecided transaction's first acknowledged offset in its log",
    "read_committed never returns a record of an aborted or undecided transaction (leaders as read, every replica "
    "at the end)",
    "a committed transaction visible in all its partitions (each record once, at its offset), an aborted one in none",
    "a fenced producer's late batch is refused",
    "every transaction decided and its markers written once faults stop; no leader's LSO stays below its HWM",
    "consume-transform-produce exactly once: every committed input record in one committed output, in input "
    "order per input partition, once the transformers caught up",
]


def build_parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python -m simulations.dst",
        description="Deterministic simulation testing: the real controller, brokers, walmgr and clients on a "
        "virtual clock and network, under injected faults, with invariants checked as events happen. "
        "A failing seed replays exactly.",
    )
    p.add_argument("--list-injections", action="store_true", help="list the bugs --inject can switch on")
    p.add_argument("--debug", action="store_true", help="on failure, show the traceback")
    sub = p.add_subparsers(dest="command")
    fz = sub.add_parser("fuzz", help="run seeds until one fails or the budget is spent")
    budget = fz.add_mutually_exclusive_group()
    budget.add_argument("--seeds", type=int, default=10, help="seeds to run (default 10)")
    budget.add_argument("--hours", type=float, default=0.0, help="run seeds for this many wall-clock hours (soak)")
    fz.add_argument("--first-seed", type=int, default=1, help="the first seed (default 1)")
    fz.add_argument("--stop-at-first", action="store_true", help="stop at the first failing seed")
    fz.add_argument(
        "--shrink-runs",
        type=int,
        default=25,
        metavar="N",
        help="on a failure, spend at most N more runs dropping faults while it still fails, then print the "
        "minimised trace (default 25; 0: do not shrink)",
    )
    fz.set_defaults(func=cmd_fuzz)
    rp = sub.add_parser("replay", help="run one seed again, exactly")
    rp.add_argument("seed", type=int)
    rp.add_argument("--events", action="store_true", help="print the world's events (faults, heals)")
    rp.add_argument(
        "--only-faults",
        type=_fault_list,
        default=None,
        metavar="K,K,...",
        help="inject only these faults, by number (what a shrunk failure prints; 'none' for no faults)",
    )
    rp.set_defaults(func=cmd_replay)
    bn = sub.add_parser("bench", help="simulated seconds per wall second: idle, under load, under faults")
    bn.add_argument("--duration-s", type=float, default=30.0, help="simulated seconds of each case (default 30)")
    bn.add_argument("--seed", type=int, default=1)
    bn.add_argument("--json", action="store_true", help="print one JSON object")
    bn.set_defaults(func=cmd_bench, inject=[])
    for sp in (fz, rp):
        sp.add_argument(
            "--inject", action="append", default=[], metavar="NAME", help="switch on a known bug (repeatable)"
        )
        sp.add_argument("--json", action="store_true", help="print one JSON object")
        sp.add_argument(
            "--txn",
            action="store_true",
            help="add transactional producers, their coordinator's stand-in and a read_committed reader",
        )
        sp.add_argument(
            "--create-partitions",
            action="store_true",
            help=f"grow the topic by CreatePartitions through the controller, {CREATE_PARTITIONS_PER_MIN:g} times a "
            "minute (1-3 partitions each), while the faults run: producers spread over the new partitions",
        )
        sp.add_argument(
            "--reassign",
            action="store_true",
            help=f"reassign partitions through the controller, {REASSIGN_PER_MIN:g} times a minute, while the faults "
            "run: a partition's leader or one follower moved to another broker, now and then a move cancelled",
        )
        sp.add_argument(
            "--tiering",
            action="store_true",
            help="tier the topic into segments (remote.storage.enable, a short segment.ms): the leaders' builder "
            "loops upload and swap, followers apply the swaps",
        )
    return p


def main(argv: list[str] | None = None) -> int:
    argv, debug = take_debug_flag(list(sys.argv[1:] if argv is None else argv))
    if os.environ.get("PYTHONHASHSEED") != "0":
        # String hashes decide set order in the real code: fix them, or a
        # seed would not replay.
        os.execve(
            sys.executable, [sys.executable, "-m", "simulations.dst", *argv], {**os.environ, "PYTHONHASHSEED": "0"}
        )
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_injections:
        for name, what in injected_bugs.KNOWN.items():
            print(f"{name:40} {what}")
        return 0
    if args.command is None:
        parser.error("give a command: fuzz or replay (or --list-injections)")
    if args.command == "bench" and args.duration_s <= 0:
        parser.error("--duration-s must be > 0")
    if args.command == "fuzz" and (args.seeds <= 0 or args.hours < 0 or args.shrink_runs < 0):
        parser.error("--seeds must be > 0, --hours >= 0 and --shrink-runs >= 0")
    unknown = [n for n in args.inject if n not in injected_bugs.KNOWN]
    if unknown:
        parser.error(f"--inject: unknown bug {unknown[0]!r} (see --list-injections)")
    return run_cli("simulations.dst", lambda: int(args.func(args)), debug=debug)


if __name__ == "__main__":
    sys.exit(main())
