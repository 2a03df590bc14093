"""A store URL naming an unknown S3 reader or retry mode is refused before
any client is built (the readers against SeaweedFS are in
tests/system/test_s3_readers.py; the choices a URL makes, in
tests/integration/test_s3_store_config.py)."""

from __future__ import annotations

import pytest

from partlog.wal.store_url import open_store
from walmgr.config import split_store_url


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("s3://b?reader=curl", "S3 reader must be one of"),
        ("s3://b?retry=legacy", "S3 retry mode must be one of"),
    ],
)
def test_a_wrong_reader_or_retry_mode_is_one_clear_error(url: str, named: str) -> None:
    for parse in (open_store, split_store_url):
        with pytest.raises(ValueError, match=named) as e:
            parse(url)
        assert url in str(e.value)
