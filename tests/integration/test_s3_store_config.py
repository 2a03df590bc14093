"""S3Store built from a store URL or a config, without a server: what it
describes (never the secret) and which reader and retry mode it uses.
Integration tier: building a boto3 client asks the instance metadata
endpoint (169.254.169.254) for a region."""

from __future__ import annotations

from partlog.wal.s3_store import S3Config, S3Store
from partlog.wal.store_url import open_store
from tests.objectstore_contract import SECRET
from walmgr.config import split_store_url


def test_open_store_s3_url() -> None:
    store = open_store("s3://my-bucket?endpoint=http://127.0.0.1:1&region=eu-west-1")
    assert isinstance(store, S3Store)
    assert store.bucket == "my-bucket"
    assert store.config.endpoint_url == "http://127.0.0.1:1"
    assert store.config.region == "eu-west-1"
    assert store.describe() == "s3://my-bucket at http://127.0.0.1:1"


def test_s3_describe_never_shows_the_secret() -> None:
    config = S3Config(bucket="b", endpoint_url="http://127.0.0.1:1", access_key_id="AKID", secret_access_key=SECRET)
    store = S3Store(config)
    assert SECRET not in store.describe()
    assert SECRET not in repr(config)
    assert store.describe() == "s3://b at http://127.0.0.1:1"
    assert S3Store(S3Config(bucket="b")).describe() == "s3://b at aws"


def test_walmgr_reads_through_obstore_with_adaptive_retries_unless_told() -> None:
    url, prefix = split_store_url("s3://b/wal?endpoint=http://127.0.0.1:1")
    assert prefix == "wal"
    store = open_store(url)
    assert isinstance(store, S3Store)
    assert (store.config.reader, store.config.retry_mode, store.reads_with) == ("obstore", "adaptive", "obstore")
    url, _ = split_store_url("s3://b?endpoint=http://127.0.0.1:1&reader=boto3&retry=standard")
    store = open_store(url)
    assert isinstance(store, S3Store)
    assert (store.config.reader, store.config.retry_mode) == ("boto3", "standard")
