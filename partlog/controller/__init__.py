"""The embedded controller: its core, RPC server and client, and the cluster metadata brokers use."""

# The names below are imported on first use (partlog.lazy_exports).

from __future__ import annotations

from typing import TYPE_CHECKING

from partlog.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from partlog.controller.client import ControllerMetadata
    from partlog.controller.cluster_meta import BrokerInfo, MetadataSource, StaticMetadata
    from partlog.controller.core import Controller, ControllerConfig
    from partlog.controller.server import ControllerServer

_EXPORTS = {
    "BrokerInfo": "partlog.controller.cluster_meta",
    "Controller": "partlog.controller.core",
    "ControllerConfig": "partlog.controller.core",
    "ControllerMetadata": "partlog.controller.client",
    "ControllerServer": "partlog.controller.server",
    "MetadataSource": "partlog.controller.cluster_meta",
    "StaticMetadata": "partlog.controller.cluster_meta",
}

__all__ = [
    "BrokerInfo",
    "Controller",
    "ControllerConfig",
    "ControllerMetadata",
    "ControllerServer",
    "MetadataSource",
    "StaticMetadata",
]

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
