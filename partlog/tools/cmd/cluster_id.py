"""``partlog cluster-id``: print a new random cluster id."""

from __future__ import annotations

import argparse
import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from partlog.tools.cmd.common import Subparsers


def add_parser(sub: Subparsers) -> None:
    sub.add_parser(
        "cluster-id",
        help="print a new random cluster id (for a cluster file's cluster_id, or partlog controller --cluster-id)",
    )


def run(args: argparse.Namespace) -> int:
    print(uuid.uuid4())
    return 0
