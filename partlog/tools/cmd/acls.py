"""``partlog acls add|remove|list``: the cluster's ACLs, through the embedded
controller (Kafka clients use CreateAcls, DescribeAcls and DeleteAcls on any
broker with ``--authorizer``; docs/security.md).  Also the authorizer
flags of ``partlog broker`` and ``partlog cluster`` (:func:`add_authorizer_flags`,
:func:`authorizer_config`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from partlog.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    AuthorizerConfig,
    PatternType,
    ResourceType,
)
from partlog.rpc.secret import read_secret_file
from partlog.tools.cmd.common import add_tls, cluster_id_arg, host_port, tls_contexts
from partlog.tools.cmd.flags import TIMEOUT_MS_MAX, positive_int_at_most

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers

__all__ = ["AclFlagError", "add_authorizer_flags", "add_parser", "authorizer_config", "run"]

_TYPES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP, "cluster": ResourceType.CLUSTER,
          "transactional-id": ResourceType.TRANSACTIONAL_ID}  # fmt: skip
_OPS = {o.name.lower().replace("_", "-"): o for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY)}


class AclFlagError(ValueError):
    """Flags that cannot work as given: one line, exit status 2."""

    exit_status = 2


def add_authorizer_flags(parser: argparse.ArgumentParser, rpc: str) -> None:
    """--authorizer, --super-users and --allow-everyone-if-no-acl-found;
    ``rpc`` ends --authorizer's help: whom the broker RPC's CLUSTER_ACTION
    check (partlog.broker.rpc_authz) concerns and what they need."""
    ag = parser.add_argument_group("authorization (Kafka's ACLs; docs/security.md)")
    ag.add_argument(
        "--authorizer",
        action="store_true",
        help="check every Kafka request against the cluster's ACLs (off by default: everything is allowed); "
        "every broker RPC method then needs CLUSTER_ACTION on the cluster, as Kafka's inter-broker requests: " + rpc,
    )
    ag.add_argument(
        "--super-users",
        default="",
        metavar="PRINCIPALS",
        help="principals allowed everything, ';'-separated as Kafka's super.users (e.g. 'User:admin;User:ops')",
    )
    ag.add_argument(
        "--allow-everyone-if-no-acl-found",
        action="store_true",
        help="allow a request on a resource no ACL names (allow.everyone.if.no.acl.found; default false)",
    )


def authorizer_config(args: argparse.Namespace) -> AuthorizerConfig | None:
    """The broker's authorizer from --authorizer, --super-users and
    --allow-everyone-if-no-acl-found (None: no authorization)."""
    if not args.authorizer:
        if args.super_users or args.allow_everyone_if_no_acl_found:
            raise AclFlagError("--super-users and --allow-everyone-if-no-acl-found need --authorizer")
        return None
    supers = frozenset(p.strip() for p in args.super_users.split(";") if p.strip())
    for p in supers:
        kind, _, name = p.partition(":")
        if not kind or not name:
            raise AclFlagError(f"--super-users: {p!r} is not a principal of the form Type:name")
    return AuthorizerConfig(super_users=supers, allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found)


def add_parser(sub: Subparsers) -> None:
    ac = sub.add_parser("acls", help="manage the cluster's ACLs through the controller")
    ac_sub = ac.add_subparsers(dest="acls", required=True)
    for name, text in (
        ("add", "add one ACL (Kafka's kafka-acls --add)"),
        ("remove", "remove the ACLs the flags match (omitted flags match any)"),
        ("list", "list the ACLs the flags match (omitted flags match any)"),
    ):
        p = ac_sub.add_parser(name, help=text, description=text)
        need = name == "add"
        p.add_argument("--controller", required=True, metavar="HOST:PORT", help="the controller's address")
        p.add_argument("--resource-type", choices=sorted(_TYPES), required=need, help="the resource's type")
        p.add_argument("--name", default=None, help="the resource's name ('*': every one; cluster: kafka-cluster)")
        p.add_argument("--prefixed", action="store_true", help="the name is a prefix (PREFIXED pattern)")
        p.add_argument("--principal", required=need, default=None, help="Type:name, e.g. User:alice (User:* for all)")
        p.add_argument("--host", default="*" if need else None, help="the client's address ('*', the default: any)")
        p.add_argument("--operation", choices=sorted(_OPS), required=need, help="the operation")
        p.add_argument("--deny", action="store_true", help="a DENY entry (default ALLOW)")
        p.add_argument("--secret-file", default=None, help="file holding the shared secret of the controller's RPCs")
        p.add_argument("--cluster-id", default=None, metavar="UUID", help="refuse a controller of another cluster")
        add_tls(p)
        p.add_argument("--timeout-ms", type=positive_int_at_most(TIMEOUT_MS_MAX), default=30_000,
                       help="give up if the controller does not answer (default 30000)")  # fmt: skip


def _binding(args: argparse.Namespace) -> AclBinding:
    rt = _TYPES[args.resource_type]
    name = args.name if args.name is not None else ("kafka-cluster" if rt == ResourceType.CLUSTER else None)
    if name is None:
        raise AclFlagError("--name is needed (or '*' for every resource)")
    pattern = PatternType.PREFIXED if args.prefixed else PatternType.LITERAL
    permission = AclPermission.DENY if args.deny else AclPermission.ALLOW
    return AclBinding(rt, name, pattern, args.principal, args.host, _OPS[args.operation], permission)


def _filter(args: argparse.Namespace) -> AclBindingFilter:
    pattern = (
        PatternType.PREFIXED if args.prefixed else (PatternType.LITERAL if args.name is not None else PatternType.ANY)
    )
    return AclBindingFilter(
        _TYPES[args.resource_type] if args.resource_type else ResourceType.ANY,
        args.name,
        pattern,
        args.principal,
        args.host,
        _OPS[args.operation] if args.operation else AclOperation.ANY,
        AclPermission.DENY if args.deny else AclPermission.ANY,
    )


def _line(b: AclBinding) -> str:
    return (f"{b.permission.name} {b.principal} from {b.host} {b.operation.name} on {b.resource_type.name} "
            f"{b.pattern_type.name} {b.resource_name}")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from partlog.controller.acls import dec_binding, enc_binding, enc_filter
    from partlog.controller.client import ControllerMetadata, ControllerUnavailableError

    try:
        host, port = host_port(args.controller)
    except ValueError as e:
        raise AclFlagError(f"--controller: {e}") from e
    what = _binding(args) if args.acls == "add" else _filter(args)
    secret = read_secret_file(args.secret_file)
    tls = tls_contexts(args)
    logging.getLogger("partlog.controller.client").setLevel(logging.ERROR)

    async def call(method: str, body: Any) -> Any:
        client = ControllerMetadata(
            host, port, cluster_id=cluster_id_arg(args.cluster_id), secret=secret, ssl=tls.client if tls else None
        )
        try:
            await client.start(timeout_ms=args.timeout_ms)
            return await client.call(method, body)
        finally:
            await client.stop()

    try:
        if isinstance(what, AclBinding):
            why = asyncio.run(call("create_acls", {"acls": [enc_binding(what)]}))["results"][0]
            if why is not None:
                print(f"partlog acls add: {why}", file=sys.stderr)
                return 2
            print(f"added: {_line(what)}")
        elif args.acls == "remove":
            gone = asyncio.run(call("delete_acls", {"filters": [enc_filter(what)]}))["results"][0]
            for v in gone:
                print(f"removed: {_line(dec_binding(v))}")
        else:
            found = asyncio.run(call("acls_poll", {"version": -1, "max_wait_ms": 0})).get("acls", [])
            for b in sorted((dec_binding(v) for v in found), key=_line):
                if what.matches(b):
                    print(_line(b))
    except ControllerUnavailableError as e:
        print(f"partlog acls {args.acls}: {e}", file=sys.stderr)
        return 1
    return 0
