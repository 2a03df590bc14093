"""The asyncio broker and its metrics."""

# The names below are imported on first use (partlog.lazy_exports).

from __future__ import annotations

from typing import TYPE_CHECKING

from partlog.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from partlog.broker.server import Broker, BrokerConfig, start_brokers

_EXPORTS = {
    "Broker": "partlog.broker.server",
    "BrokerConfig": "partlog.broker.server",
    "start_brokers": "partlog.broker.server",
}

__all__ = [
    "Broker",
    "BrokerConfig",
    "start_brokers",
]

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
