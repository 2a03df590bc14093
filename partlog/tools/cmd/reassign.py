"""``partlog topics reassign``, ``partlog topics reassignments`` and
``partlog topics drain``: move a partition's replicas, list the moves in
progress, or move every replica off one broker (docs/design/reassignment.md),
through the controller or etcd.  ``topics.py`` registers them and starts
the client; the commands here get it started."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from partlog.tools.cmd.flags import non_negative_int

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers

__all__ = ["COMMANDS", "add_parsers", "run_command"]

COMMANDS = ("reassign", "reassignments", "drain")
# How often --wait asks the controller whether the moves are done.
_WAIT_POLL_MS = 200


def _replicas(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(b) for b in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: broker ids separated by ','") from None
    return out


def add_parsers(sub: Subparsers, target: Callable[..., None]) -> None:
    """The three commands, under ``partlog topics``; ``target`` adds the
    NAME and the metadata flags every topics command takes."""
    ra = sub.add_parser(
        "reassign",
        help="move a partition's replicas to other brokers (Kafka's AlterPartitionReassignments)",
        description="Asks the controller to move partition --partition of topic NAME to the brokers --replicas "
        "names (preferred leader first). The new replicas copy the partition's metadata log from its leader and "
        "join the ISR; then the old ones are removed (and drop their logs), and a leader that is not among "
        "--replicas hands over to the first one in sync. --cancel reverts a move in progress. A bad target is "
        "INVALID_REPLICA_ASSIGNMENT, a cancel with nothing in progress NO_REASSIGNMENT_IN_PROGRESS (exit 1).",
    )
    target(ra)
    ra.add_argument("--partition", type=non_negative_int, required=True, help="the partition's index")
    what = ra.add_mutually_exclusive_group(required=True)
    what.add_argument("--replicas", type=_replicas, metavar="B,B,B", help="the target replicas, leader first")
    what.add_argument("--cancel", action="store_true", help="revert the move in progress")
    _wait_flag(ra)
    rl = sub.add_parser(
        "reassignments",
        help="list the partition moves in progress (Kafka's ListPartitionReassignments)",
        description="Prints one line per partition being reassigned (of topic NAME, or of every topic): its "
        "replicas, those being added and those being removed. Nothing printed: no move in progress.",
    )
    target(rl, name_required=False)
    rd = sub.add_parser(
        "drain",
        help="move every replica off one broker (before taking it out of the cluster)",
        description="Plans and starts the moves that take every replica off broker --broker: each one goes to "
        "a broker of the same AZ when one is free, else to an AZ the partition has no replica in, else to any "
        "broker; the least loaded first. Prints the plan; --dry-run starts nothing. Partitions already being "
        "reassigned are left alone (run it again once they are done). Exit 1 when a move was refused or some "
        "partition has no broker to go to.",
    )
    target(rd, name_required=False)
    rd.add_argument("--broker", type=non_negative_int, required=True, help="the broker to drain")
    rd.add_argument("--dry-run", action="store_true", help="print the plan, start nothing")
    _wait_flag(rd)


def _wait_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wait",
        action="store_true",
        help="then wait until the moves are done (up to --timeout-ms), printing how long they took",
    )


async def run_command(client: Any, args: argparse.Namespace) -> int:
    """Run ``args.topics`` (one of COMMANDS) with a started metadata client."""
    from partlog.controller.reassignment import ReassignmentAdmin

    if not isinstance(client, ReassignmentAdmin):  # a controller client and etcd both are
        print(f"partlog topics {args.topics}: this metadata source cannot reassign partitions", file=sys.stderr)
        return 2
    if args.topics == "reassignments":
        asked = None
        if args.name is not None:
            topic = _view(client).topic(args.name)
            asked = [] if topic is None else [(args.name, i) for i in range(topic.num_partitions)]
        for r in await client.list_reassignments(asked):
            print(f"{r.topic}/{r.partition}: replicas {list(r.replicas)} adding {list(r.adding)} "
                  f"removing {list(r.removing)}")  # fmt: skip
        return 0
    stuck = 0  # partitions a drain has nowhere to move
    changes: dict[tuple[str, int], tuple[int, ...] | None]
    if args.topics == "reassign":
        changes = {(args.name, args.partition): None if args.cancel else args.replicas}
    else:
        changes, stuck = _drain_plan(client, args)
        if args.dry_run or not changes:
            return 1 if stuck else 0
    started = time.monotonic()
    answers = await client.alter_reassignments(changes)
    failed = 0
    for (name, p), refused in sorted(answers.items()):
        if refused is not None:
            failed += 1
            print(f"partlog topics {args.topics}: {name}/{p}: {refused.error.name}: {refused.message}",
                  file=sys.stderr)  # fmt: skip
    if failed or stuck:
        return 1
    if args.topics == "reassign":
        print(f"{args.name}/{args.partition}: {'cancelled' if args.cancel else 'started'}")
    if args.wait:
        return await _wait(client, args, list(changes), started)
    return 0


def _view(client: Any) -> Any:
    """The client as a metadata view (``isinstance`` above narrowed it to
    the admin protocol alone)."""
    return client


def _drain_plan(client: Any, args: argparse.Namespace) -> tuple[dict[tuple[str, int], tuple[int, ...] | None], int]:
    """The moves of ``topics drain`` (printed), and how many partitions
    have nowhere to go."""
    from partlog.tools.drain_plan import drain_targets

    topics = _view(client).topics()
    if args.name is not None:
        topics = [t for t in topics if t.name == args.name]
    plan = drain_targets(topics, _view(client).brokers(), args.broker)
    for (name, p), target in sorted(plan.targets.items()):
        print(f"{name}/{p}: -> {list(target)}")
    for name, p in plan.stuck:
        print(f"partlog topics drain: {name}/{p}: no broker left to take its replica", file=sys.stderr)
    if not plan.targets and not plan.stuck:
        print(f"broker {args.broker} holds no replica to move")
    return dict(plan.targets), len(plan.stuck)


async def _wait(client: Any, args: argparse.Namespace, keys: Iterable[tuple[str, int]], started: float) -> int:
    asked = list(keys)
    deadline = started + args.timeout_ms / 1000
    while True:
        pending = await client.list_reassignments(asked)
        if not pending:
            print(f"done in {(time.monotonic() - started) * 1000:.0f} ms")
            return 0
        if time.monotonic() >= deadline:
            names = ", ".join(f"{r.topic}/{r.partition}" for r in pending[:5])
            print(f"partlog topics {args.topics}: {len(pending)} still moving after {args.timeout_ms} ms: {names}",
                  file=sys.stderr)  # fmt: skip
            return 1
        await asyncio.sleep(_WAIT_POLL_MS / 1000)
