"""The fetch path's sans-IO core: read planning, batch checks, header splice, the range cache."""

# The names below are imported on first use (partlog.lazy_exports).

from __future__ import annotations

from typing import TYPE_CHECKING

from partlog.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from partlog.fetch.reads import RangeCache, assemble, plan_reads

_EXPORTS = {
    "RangeCache": "partlog.fetch.reads",
    "assemble": "partlog.fetch.reads",
    "plan_reads": "partlog.fetch.reads",
}

__all__ = [
    "RangeCache",
    "assemble",
    "plan_reads",
]

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
