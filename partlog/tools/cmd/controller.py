"""``partlog controller``: the embedded controller as its own process."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from partlog.limits import PORT_MAX
from partlog.rpc.secret import read_secret_file
from partlog.tools.cmd.common import add_tls, cluster_id_arg, tls_contexts
from partlog.tools.cmd.flags import TIMEOUT_MS_MAX, int_in, positive_int, positive_int_at_most
from partlog.util.cli_errors import one_line

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers


def add_parser(sub: Subparsers) -> None:
    ctl = sub.add_parser(
        "controller",
        help="run the controller: cluster metadata, leader elections, producer-id blocks",
        description="Runs the embedded controller as its own process until SIGTERM: brokers register and heartbeat "
        "(partlog broker --controller), it elects partition leaders from the ISR when a broker's session times out, "
        "commits ISR changes, hands out producer-id blocks and pushes metadata by long-poll. Its state lives in "
        "LMDB under --data-dir; a second controller on the same directory refuses to start.",
    )
    ctl.add_argument("--data-dir", required=True, help="state directory")
    ctl.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ctl.add_argument(
        "--port", type=int_in(0, PORT_MAX), default=0, help="port to listen on (default: any free port, printed)"
    )
    ctl.add_argument(
        "--session-timeout-ms",
        type=positive_int_at_most(TIMEOUT_MS_MAX),
        default=9000,
        help="fence a broker not heard from this long (default 9000)",
    )
    ctl.add_argument(
        "--unclean-leader-election",
        action="store_true",
        help="elect an out-of-sync replica when no ISR member is alive (may lose acknowledged data)",
    )
    ctl.add_argument(
        "--min-insync-replicas",
        type=positive_int,
        default=1,
        metavar="N",
        help="the brokers' min.insync.replicas (a topic's override wins): replicas that leave an ISR below it "
        "stay eligible leaders (KIP-966's ELR; default 1, as Kafka's)",
    )
    ctl.add_argument("--secret-file", default=None, help="file holding the shared secret of its RPCs (>= 16 bytes)")
    ctl.add_argument(
        "--cluster-id",
        default=None,
        metavar="UUID",
        help="the cluster id a new state directory gets (default: a random one); an existing one must match",
    )
    add_tls(ctl)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import signal

    from partlog.controller.core import ControllerConfig
    from partlog.controller.server import ControllerServer
    from partlog.controller.state_store import ControllerStateError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = ControllerConfig(
            args.data_dir,
            broker_session_timeout_ms=args.session_timeout_ms,
            unclean_leader_election_enable=args.unclean_leader_election,
            min_insync_replicas=args.min_insync_replicas,
            cluster_id=cluster_id_arg(args.cluster_id),
        )
    except ValueError as e:
        print(f"partlog controller: {e}", file=sys.stderr)
        return 2
    secret = read_secret_file(args.secret_file)
    tls = tls_contexts(args)

    async def serve() -> int:
        server = ControllerServer(
            config, host=args.host, port=args.port, secret=secret, ssl=tls.server if tls is not None else None
        )
        try:
            await server.start()
        except (ControllerStateError, OSError) as e:
            print(f"partlog controller: {one_line(e)}", file=sys.stderr)
            return 2
        print(
            f"controller of cluster {server.controller.cluster_id} listening on {args.host}:{server.port}", flush=True
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.stop()
        return 0

    return asyncio.run(serve())
