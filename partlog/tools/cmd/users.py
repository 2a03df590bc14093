"""``partlog users add|delete|list``: SCRAM users of the Kafka listeners'
SASL authentication, kept by the controller or etcd (KIP-554's credentials:
salt, iterations and derived keys, never the password).  The password is
read from ``--password-file`` or standard input, never from the command
line (where ``ps`` would show it)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from partlog.kafka.scram_credential import MECHANISM_IDS, MECHANISM_NAMES, SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN
from partlog.rpc.secret import read_secret_file
from partlog.tools.cmd.common import add_metadata_target, admin_metadata, host_port, tls_contexts
from partlog.tools.cmd.flags import int_in

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers

SALT_BYTES = 32
PASSWORD_BYTES_MAX = 1024


def add_parser(sub: Subparsers) -> None:
    up = sub.add_parser("users", help="manage the SCRAM users of the Kafka listeners (through the controller)")
    us = up.add_subparsers(dest="users", required=True)
    add = us.add_parser(
        "add",
        help="add a user, or set its password",
        description="Stores SCRAM credentials for NAME (each --mechanism) in the controller: a random salt, "
        "--iterations, and the keys derived from the password, which is read from --password-file or the first "
        "line of standard input. SASL PLAIN checks passwords against the same credentials.",
    )
    add.add_argument("name", metavar="NAME")
    add.add_argument("--password-file", default=None, metavar="FILE", help="read the password here (else stdin)")
    add.add_argument(
        "--iterations",
        type=int_in(SCRAM_ITERATIONS_MIN, SCRAM_ITERATIONS_MAX),
        default=SCRAM_ITERATIONS_MIN,
        help=f"SCRAM iterations (default {SCRAM_ITERATIONS_MIN}, Kafka's least)",
    )
    delete = us.add_parser("delete", help="delete a user's credentials", description="Deletes NAME's credentials.")
    delete.add_argument("name", metavar="NAME")
    ls = us.add_parser("list", help="list users and their mechanisms", description="Lists users (or NAMEs).")
    ls.add_argument("names", metavar="NAME", nargs="*")
    for p in (add, delete, ls):
        if p is not ls:
            p.add_argument(
                "--mechanism",
                action="append",
                choices=sorted(MECHANISM_IDS),
                help="SCRAM mechanism, repeatable (default both)",
            )
        add_metadata_target(p)


def _password(args: argparse.Namespace) -> str:
    if args.password_file is not None:
        with open(args.password_file, encoding="utf-8") as f:
            text = f.read(PASSWORD_BYTES_MAX + 1)
    else:
        text = sys.stdin.readline(PASSWORD_BYTES_MAX + 1)
    password = text.rstrip("\r\n")
    if not password or len(password) > PASSWORD_BYTES_MAX:
        raise ValueError(f"the password must be 1-{PASSWORD_BYTES_MAX} characters on one line")
    return password


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import os

    from partlog.controller.client import ControllerUnavailableError
    from partlog.controller.cluster_meta import MetadataError
    from partlog.controller.scram_client import ControllerScramCredentials
    from partlog.controller.scram_store import Upsertion
    from partlog.kafka.errors import Errors
    from partlog.kafka.scram_credential import salted_password

    what = f"partlog users {args.users}"
    if (args.controller is None) == (args.metadata is None):
        print(f"{what}: give exactly one of --controller HOST:PORT and --metadata etcd://...", file=sys.stderr)
        return 2
    host, port, etcd_target = "", 0, None  # the one the flags name is set below
    try:
        if args.controller is not None:
            host, port = host_port(args.controller)
        else:
            from partlog.controller.etcd_layout import parse_etcd_url

            etcd_target = parse_etcd_url(args.metadata)
        password = _password(args) if args.users == "add" else ""
    except (ValueError, OSError) as e:
        print(f"{what}: {e}", file=sys.stderr)
        return 2
    mechanisms = [MECHANISM_IDS[m] for m in sorted(set(getattr(args, "mechanism", None) or MECHANISM_IDS))]
    secret = read_secret_file(args.secret_file)
    tls = tls_contexts(args)
    logging.getLogger("partlog.controller.client").setLevel(logging.ERROR)
    logging.getLogger("partlog.controller.etcd_meta").setLevel(logging.ERROR)

    async def main() -> int:
        client = admin_metadata(args, etcd_target, host, port, secret, tls)
        try:
            await client.start(timeout_ms=args.timeout_ms)
        except (ControllerUnavailableError, MetadataError) as e:
            await client.stop()
            print(f"{what}: {e}", file=sys.stderr)
            return 1
        try:
            creds: Any
            if args.metadata is not None:
                from partlog.controller.etcd_scram import EtcdScramCredentials

                creds = EtcdScramCredentials(client.conn, client.keys)
            else:
                creds = ControllerScramCredentials(client)
            if args.users == "list":
                listed = await creds.describe(args.names or None)
                if isinstance(listed, Errors):
                    print(f"{what}: {listed.name}", file=sys.stderr)
                    return 1
                status = 0
                for u in listed:
                    if u.error != Errors.NONE:
                        print(f"{what}: {u.user}: {u.error.name} ({u.message})", file=sys.stderr)
                        status = 1
                        continue
                    infos = ", ".join(f"{MECHANISM_NAMES.get(m, m)} iterations={i}" for m, i in u.infos)
                    print(f"{u.user}: {infos}")
                return status
            if args.users == "add":
                ups = []
                for m in mechanisms:
                    salt = os.urandom(SALT_BYTES)
                    salted = salted_password(MECHANISM_NAMES[m], password.encode(), salt, args.iterations)
                    ups.append(Upsertion(args.name, m, args.iterations, salt, salted))
                answer = await creds.alter([], ups)
            else:
                answer = await creds.alter([(args.name, m) for m in mechanisms], [])
            if isinstance(answer, Errors):
                print(f"{what}: {answer.name}", file=sys.stderr)
                return 1
            failed = [r for r in answer if r.error != Errors.NONE]
            for r in failed:
                print(f"{what}: {r.user}: {r.error.name} ({r.message})", file=sys.stderr)
            if not failed:
                done = "added" if args.users == "add" else "deleted"
                print(f"user {args.name} {done}: {', '.join(MECHANISM_NAMES[m] for m in mechanisms)}")
            return 1 if failed else 0
        finally:
            await client.stop()

    return asyncio.run(main())
