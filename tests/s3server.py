"""The SeaweedFS test server lives in ``partlog.util.seaweedfs`` (the produce
benchmark uses it too); tests import it from here."""

from partlog.util.seaweedfs import (
    ACCESS_KEY_ID,
    REGION,
    SECRET_ACCESS_KEY,
    WEED_PACKAGE,
    S3Server,
    S3ServerError,
    find_weed,
    s3_client,
    start_seaweedfs,
)

__all__ = [
    "ACCESS_KEY_ID",
    "REGION",
    "SECRET_ACCESS_KEY",
    "WEED_PACKAGE",
    "S3Server",
    "S3ServerError",
    "find_weed",
    "s3_client",
    "start_seaweedfs",
]
