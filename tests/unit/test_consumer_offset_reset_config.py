"""The consumer refuses an auto_offset_reset Kafka does not have."""

from __future__ import annotations

import pytest

from partlog.client.consumer import Consumer


def test_auto_offset_reset_is_checked() -> None:
    with pytest.raises(ValueError, match="auto_offset_reset"):
        Consumer([("127.0.0.1", 1)], auto_offset_reset="smallest")
