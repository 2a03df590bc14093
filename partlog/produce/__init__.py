"""The produce path's sans-IO core: WAL buffers, uploads, commit fan-out, replies."""

# The names below are imported on first use (partlog.lazy_exports).

from __future__ import annotations

from typing import TYPE_CHECKING

from partlog.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from partlog.produce.pipeline import ProduceConfig, ProducePipeline, Reply, SendCommit, Upload

_EXPORTS = {
    "ProduceConfig": "partlog.produce.pipeline",
    "ProducePipeline": "partlog.produce.pipeline",
    "Reply": "partlog.produce.pipeline",
    "SendCommit": "partlog.produce.pipeline",
    "Upload": "partlog.produce.pipeline",
}

__all__ = [
    "ProduceConfig",
    "ProducePipeline",
    "Reply",
    "SendCommit",
    "Upload",
]

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
