"""walmgr's configuration: one TOML file whose keys are the field names of
:class:`WalmgrConfig`, except the scan engine's, which sit in a ``[scan]``
table (``scan.engine = "spark"``, ``scan.spark_master = "spark://h:7077"``)
and map to ``scan_engine`` / ``scan_spark_master``.

Validation happens in ``__post_init__``, so a config built in code (tests,
``walmgr scan --store URL --registry DIR``) is checked exactly like one read
from a file.  The timing keys feed the deletion-safety argument
(design.md, "Deletion safety"): ``commit_deadline_ms`` must equal the
brokers' ``commit_deadline_ms``, and :attr:`WalmgrConfig.age_gate_ms` is how
old an object must be before walmgr considers it at all.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from partlog import injected_bugs
from partlog.kafka.principal_rules import PrincipalMapper
from partlog.limits import PORT_MAX
from partlog.produce.pipeline import ProduceConfig
from partlog.store import COMMIT_DEADLINE_MS_DEFAULT
from partlog.store.layout import SEGMENT_SWAP_DEADLINE_MS_DEFAULT
from partlog.tiered.remote_storage import TIERED_PREFIX_DEFAULT
from partlog.wal.key import make_wal_key
from partlog.wal.objectstore import DELETE_KEYS_MAX, check_key
from partlog.wal.s3_store import s3_config_from_url
from walmgr.paced_store import READ_ATTEMPTS_DEFAULT

if TYPE_CHECKING:
    from partlog.controller.etcd_layout import EtcdTarget

# The brokers' default WAL key prefix (ProduceConfig.key_prefix): walmgr must
# look where brokers write.
PREFIX_DEFAULT = ProduceConfig().key_prefix
# How far broker clocks may disagree with walmgr's.  NTP keeps hosts within
# milliseconds; 10 s leaves room for a host whose NTP has failed for a while.
MAX_CLOCK_SKEW_MS_DEFAULT = 10_000
# Extra wait on top of the deadline and the skew: it also bounds how long a
# reader may cache a coordinate (grace_ms >= 2 * reader_cache_ttl_ms).
GRACE_MS_DEFAULT = 60_000
CYCLE_INTERVAL_MS_DEFAULT = 30_000
# A full listing catches what incremental scans miss (keys sorting before a
# shard's position); hourly keeps its LIST cost small next to the brokers' PUTs.
FULL_SCAN_INTERVAL_MS_DEFAULT = 3_600_000
# Keys per DeleteObjects call: S3 allows 1000; 250 keeps one failed call's
# retry small and spreads deletes over the cycle.
DELETE_BATCH_SIZE_DEFAULT = 250
CHECK_TIMEOUT_MS_DEFAULT = 10_000
# The longest one deletion's answers (its leader check to the end of its
# sweep) may span; longer, and the round keeps all.  Under half the brokers'
# release grace (60 s: partlog.store.release_grace, where the argument is).
VERDICT_WINDOW_MS_DEFAULT = 25_000
# How long a one-shot command (gc --once, scan) waits for the cluster
# metadata before it gives up with an error; the daemon keeps retrying (and
# logs and counts every failure: walmgr_metadata_errors).
METADATA_TIMEOUT_MS_DEFAULT = 30_000
# Deleted and gone records stay this long, for `walmgr inspect` and audits.
TOMBSTONE_RETENTION_MS_DEFAULT = 7 * 24 * 3_600_000
# Bounds of the pacing keys: S3's own per-prefix ceiling is about 5,500
# GETs a second; beyond a million a second is a typo.
S3_REQUESTS_PER_S_MAX = 1_000_000
STORE_READ_ATTEMPTS_MAX = 20
FOOTER_READS_MAX_IN_FLIGHT_DEFAULT = 32
FOOTER_READS_MAX_IN_FLIGHT_MAX = 1024  # threads: beyond this, a typo
CONTROLLER_SCHEME = "controller://"
# Cluster metadata on etcd (partlog.controller.etcd_meta).
ETCD_SCHEMES = ("etcd://", "etcd+tls://")
# walmgr's S3 defaults, unless the store URL names its own: footer reads
# through obstore (a tenth of boto3's CPU per GET, so parallel reads scale)
# and botocore's adaptive retries (slow down on 503 SlowDown).
S3_URL_DEFAULTS = (("reader", "obstore"), ("retry", "adaptive"))
# Where full scans run: in this process, or on Spark (walmgr.spark_scan).
# Incremental scans always run in-process: they list little and read only
# new footers, and a Spark job's start-up would cost more than the scan.
SCAN_ENGINES = ("local", "spark")
SCAN_SPARK_MASTER_DEFAULT = "local[*]"
# The [scan] table's keys -> WalmgrConfig fields.
_SCAN_TABLE = {"engine": "scan_engine", "spark_master": "scan_spark_master"}


class WalmgrConfigError(ValueError):
    """A config value is wrong.  ``key`` names the config key; ``path`` the
    file it came from (None for a config built in code)."""

    def __init__(self, message: str, *, key: str | None = None, path: str | None = None) -> None:
        where = f"{path}: " if path else ""
        what = f"{key}: " if key else ""
        super().__init__(f"{where}{what}{message}")
        self.key = key
        self.path = path
        self.problem = message


def split_store_url(url: str) -> tuple[str, str]:
    """``(store URL for partlog.wal.store_url.open_store, key prefix)``.

    The store URL gets walmgr's ``S3_URL_DEFAULTS`` for the parameters it
    does not name.

    For ``s3://bucket/some/prefix?endpoint=URL`` the path after the bucket
    is the key prefix (``some/prefix``) and the store URL is
    ``s3://bucket?endpoint=URL``; open_store itself ignores the path, so
    keeping it there would silently list the whole bucket.  A ``file://``
    URL or a plain path names a directory: the whole of it is the store and
    the prefix is "" (it comes from the ``prefix`` key).

    Raises ValueError naming the URL when the scheme, bucket or query is wrong.
    """
    if not url:
        raise ValueError("store URL is empty")
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme in ("", "file"):
        path = urllib.parse.unquote(parsed.path if parsed.scheme else url)
        if not path:
            raise ValueError(f"store URL {url!r}: no path")
        return url, ""
    if parsed.scheme != "s3":
        raise ValueError(f"store URL {url!r}: scheme must be file:// or s3://")
    if not parsed.netloc:
        raise ValueError(f"store URL {url!r}: no bucket (s3://bucket/prefix?endpoint=URL)")
    s3_config_from_url(url)  # the checks open_store makes, at config time
    given = urllib.parse.parse_qs(parsed.query)
    prefix = urllib.parse.unquote(parsed.path).strip("/")
    query = parsed.query
    for name, value in S3_URL_DEFAULTS:
        if name not in given:
            query = f"{query}&{name}={value}" if query else f"{name}={value}"
    return urllib.parse.urlunsplit(("s3", parsed.netloc, "", query, "")), prefix


def parse_host_port(text: str, *, port_zero_ok: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 hosts in brackets) -> (host, port); ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    low = 0 if port_zero_ok else 1
    if not sep or not host or not port.isdigit() or not low <= int(port) <= PORT_MAX:
        raise ValueError(f"expected HOST:PORT with a port in [{low}, {PORT_MAX}], got {text!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


@dataclass(frozen=True, slots=True)
class WalmgrConfig:
    store: str  # file:///dir, a plain dir, or s3://bucket[/prefix][?endpoint=URL&region=R]
    registry: str  # directory of the registry's LMDB environment
    # The WAL key prefix, as the brokers' ProduceConfig.key_prefix.  For an
    # s3:// store whose URL has a path, that path is the prefix; giving a
    # different one here is refused.  Normalised without slashes at the ends.
    prefix: str = PREFIX_DEFAULT
    # The tiered segments' key prefix, as the brokers' (ObjectStoreRsm's):
    # listed and gated as segments (docs/design/tiered-gate.md).  Never equal
    # to, or nested with, the WAL prefix: each fence holds one kind of key.
    tiered_prefix: str = TIERED_PREFIX_DEFAULT
    commit_deadline_ms: int = COMMIT_DEADLINE_MS_DEFAULT  # must equal the brokers'
    max_clock_skew_ms: int = MAX_CLOCK_SKEW_MS_DEFAULT
    grace_ms: int = GRACE_MS_DEFAULT
    reader_cache_ttl_ms: int = 0  # the longest any reader caches a coordinate
    cycle_interval_ms: int = CYCLE_INTERVAL_MS_DEFAULT
    full_scan_interval_ms: int = FULL_SCAN_INTERVAL_MS_DEFAULT
    delete_batch_size: int = DELETE_BATCH_SIZE_DEFAULT
    check_timeout_ms: int = CHECK_TIMEOUT_MS_DEFAULT
    verdict_window_ms: int = VERDICT_WINDOW_MS_DEFAULT  # < brokers' release_grace_ms / 2
    # "controller://HOST:PORT", "etcd://HOST:PORT[,...][/PREFIX]", a static
    # cluster TOML file, or "" for none.
    metadata: str = ""
    listen: str = ""  # "HOST:PORT" for broker notifications, "" for none
    metrics_port: int = 0  # 0: no metrics endpoint
    secret_file: str = ""
    tombstone_retention_ms: int = TOMBSTONE_RETENTION_MS_DEFAULT
    scan_engine: str = "local"  # TOML: [scan] engine
    scan_spark_master: str = SCAN_SPARK_MASTER_DEFAULT  # TOML: [scan] spark_master
    # The cluster this walmgr manages ("": the metadata's, bound on first
    # use).  The registry, the metadata, every broker and every footer must
    # name the same one.
    cluster_id: str = ""
    metadata_timeout_ms: int = METADATA_TIMEOUT_MS_DEFAULT
    # Mutual TLS to brokers and the controller, and for the notification
    # listener (the brokers' CA, and a certificate of walmgr's own).
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # walmgr's requests to the bucket a second (0: no cap), and how often a
    # read that fails with a retriable error (503 SlowDown...) is tried
    # (walmgr/paced_store.py).
    s3_requests_per_s_max: int = 0
    store_read_attempts: int = READ_ATTEMPTS_DEFAULT
    # Footer reads (suffix GETs) a scan keeps in flight (the local engine).
    footer_reads_max_in_flight: int = FOOTER_READS_MAX_IN_FLIGHT_DEFAULT
    # Authorization of the notification listener, as a Kafka broker's
    # (authorizer.class.name, super.users, allow.everyone.if.no.acl.found,
    # ssl.principal.mapping.rules): with authorizer = "standard" a peer needs
    # CLUSTER_ACTION on the cluster (the cluster's ACLs, from the metadata).
    authorizer: str = ""
    super_users: str = ""  # "User:a;User:b"
    allow_everyone_if_no_acl_found: int = 0
    principal_mapping_rules: str = "DEFAULT"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            # TOML booleans are Python ints: refuse them explicitly.
            want = int if f.type == "int" else str
            if type(value) is not want:
                raise WalmgrConfigError(
                    f"must be {want.__name__}, got {type(value).__name__} {value!r}", key=_toml_key(f.name)
                )
        if not self.registry:
            raise WalmgrConfigError("must name a directory", key="registry")
        if self.scan_engine not in SCAN_ENGINES:
            raise WalmgrConfigError(f"must be one of {', '.join(SCAN_ENGINES)}, got {self.scan_engine!r}",
                                    key="scan.engine")  # fmt: skip
        if not self.scan_spark_master:
            raise WalmgrConfigError("must name a Spark master (local[*], spark://HOST:PORT, ...)",
                                    key="scan.spark_master")  # fmt: skip
        try:
            _, url_prefix = split_store_url(self.store)
        except ValueError as e:
            raise WalmgrConfigError(str(e), key="store") from e
        prefix = self.prefix.strip("/")
        if url_prefix and prefix not in (url_prefix, PREFIX_DEFAULT):
            raise WalmgrConfigError(
                f"{prefix!r} disagrees with the path of the store URL {self.store!r} ({url_prefix!r}); give one",
                key="prefix",
            )
        prefix = url_prefix or prefix
        if not prefix:
            # Deletion is confined to keys under "<prefix>/"; without a prefix
            # that fence would be the whole bucket.
            raise WalmgrConfigError("must not be empty: walmgr only touches keys under <prefix>/", key="prefix")
        try:
            make_wal_key(prefix, 0, 0, "0")  # the brokers' own check of key_prefix
        except ValueError as e:
            raise WalmgrConfigError(f"{prefix!r}: {e}", key="prefix") from e
        object.__setattr__(self, "prefix", prefix)
        tiered = self.tiered_prefix.strip("/")
        try:
            check_key(f"{tiered or '.'}/00")  # an empty prefix is refused below
        except ValueError as e:
            raise WalmgrConfigError(f"{tiered!r}: {e}", key="tiered_prefix") from e
        if not tiered or tiered == prefix or tiered.startswith(prefix + "/") or prefix.startswith(tiered + "/"):
            # Each fence must hold one kind of key: nested prefixes would list
            # (and could delete under) the other kind's keys.
            raise WalmgrConfigError(
                f"{self.tiered_prefix!r}: must be non-empty, and neither equal to nor nested with the WAL "
                f"prefix {prefix!r}",
                key="tiered_prefix",
            )
        object.__setattr__(self, "tiered_prefix", tiered)

        if self.cluster_id:
            try:
                uuid.UUID(self.cluster_id)
            except ValueError:
                raise WalmgrConfigError(f"not a UUID: {self.cluster_id!r:.60}", key="cluster_id") from None
        tls = {"tls_ca_file": self.tls_ca_file, "tls_cert_file": self.tls_cert_file, "tls_key_file": self.tls_key_file}
        if any(tls.values()) and not all(tls.values()):
            missing = next(k for k, v in tls.items() if not v)
            raise WalmgrConfigError("TLS needs tls_ca_file, tls_cert_file and tls_key_file together", key=missing)
        if self.authorizer not in ("", "standard"):
            raise WalmgrConfigError(f'must be "standard" or "", got {self.authorizer!r:.40}', key="authorizer")
        if self.allow_everyone_if_no_acl_found not in (0, 1):
            raise WalmgrConfigError("must be 0 or 1", key="allow_everyone_if_no_acl_found")
        for p in self.super_users.split(";"):
            kind, _, name = p.strip().partition(":")
            if p.strip() and not (kind and name):
                raise WalmgrConfigError(f"{p.strip()!r:.60} is not a principal Type:name", key="super_users")
        if (self.super_users or self.allow_everyone_if_no_acl_found) and not self.authorizer:
            raise WalmgrConfigError('needs authorizer = "standard"', key="super_users")
        try:
            PrincipalMapper.parse(self.principal_mapping_rules)
        except ValueError as e:
            raise WalmgrConfigError(str(e), key="principal_mapping_rules") from None
        positive = (
            "commit_deadline_ms",
            "cycle_interval_ms",
            "full_scan_interval_ms",
            "check_timeout_ms",
            "metadata_timeout_ms",
            "verdict_window_ms",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise WalmgrConfigError(f"must be > 0, got {getattr(self, name)}", key=name)
        non_negative = (
            "max_clock_skew_ms",
            "grace_ms",
            "reader_cache_ttl_ms",
            "tombstone_retention_ms",
        )
        for name in non_negative:
            if getattr(self, name) < 0:
                raise WalmgrConfigError(f"must be >= 0, got {getattr(self, name)}", key=name)
        if self.grace_ms < 2 * self.reader_cache_ttl_ms:
            # Deletion safety, point 5: no cache may hold a coordinate for
            # longer than half the grace period.
            raise WalmgrConfigError(
                f"{self.grace_ms} is below 2 * reader_cache_ttl_ms ({2 * self.reader_cache_ttl_ms}): "
                "a reader could still use a cached coordinate of a deleted object",
                key="grace_ms",
            )
        if not 0 <= self.s3_requests_per_s_max <= S3_REQUESTS_PER_S_MAX:
            raise WalmgrConfigError(
                f"must be in [0, {S3_REQUESTS_PER_S_MAX}] (0: no cap), got {self.s3_requests_per_s_max}",
                key="s3_requests_per_s_max",
            )
        if not 1 <= self.footer_reads_max_in_flight <= FOOTER_READS_MAX_IN_FLIGHT_MAX:
            raise WalmgrConfigError(
                f"must be in [1, {FOOTER_READS_MAX_IN_FLIGHT_MAX}], got {self.footer_reads_max_in_flight}",
                key="footer_reads_max_in_flight",
            )
        if not 1 <= self.store_read_attempts <= STORE_READ_ATTEMPTS_MAX:
            raise WalmgrConfigError(
                f"must be in [1, {STORE_READ_ATTEMPTS_MAX}], got {self.store_read_attempts}",
                key="store_read_attempts",
            )
        if not 1 <= self.delete_batch_size <= DELETE_KEYS_MAX:
            raise WalmgrConfigError(
                f"must be in [1, {DELETE_KEYS_MAX}] (S3 DeleteObjects), got {self.delete_batch_size}",
                key="delete_batch_size",
            )
        if not 0 <= self.metrics_port <= PORT_MAX:
            raise WalmgrConfigError(f"must be in [0, {PORT_MAX}], got {self.metrics_port}", key="metrics_port")
        try:
            _ = self.controller_address, self.listen_address, self.etcd_target
        except ValueError as e:
            in_metadata = self.metadata.startswith((CONTROLLER_SCHEME, *ETCD_SCHEMES))
            raise WalmgrConfigError(str(e), key="metadata" if in_metadata else "listen") from e

    @property
    def age_gate_ms(self) -> int:
        """How old (by its key's created_ms) an object must be before walmgr
        considers it: after this, no leader can still commit a reference."""
        if injected_bugs.on("walmgr_gate_without_commit_deadline"):
            return self.max_clock_skew_ms + self.grace_ms
        return self.commit_deadline_ms + self.max_clock_skew_ms + self.grace_ms

    @property
    def segment_age_gate_ms(self) -> int:
        """How old (by its key's created_ms) a tiered segment's object must be
        before walmgr considers it: past the leaders' swap deadline, no
        segment key can get a first reference (tiered-gate.md, step 1)."""
        if injected_bugs.on("walmgr_segment_gate_without_swap_deadline"):
            return self.max_clock_skew_ms + self.grace_ms
        return SEGMENT_SWAP_DEADLINE_MS_DEFAULT + self.max_clock_skew_ms + self.grace_ms

    @property
    def cluster(self) -> uuid.UUID | None:
        """``cluster_id`` as a UUID (None when not configured)."""
        return uuid.UUID(self.cluster_id) if self.cluster_id else None

    @property
    def store_url(self) -> str:
        """The store URL for partlog.wal.store_url.open_store (no key prefix in it)."""
        return split_store_url(self.store)[0]

    @property
    def controller_address(self) -> tuple[str, int] | None:
        """(host, port) when ``metadata`` is ``controller://HOST:PORT``."""
        if not self.metadata.startswith(CONTROLLER_SCHEME):
            return None
        return parse_host_port(self.metadata.removeprefix(CONTROLLER_SCHEME))

    @property
    def etcd_target(self) -> EtcdTarget | None:
        """The etcd members and prefix when ``metadata`` is an etcd:// or
        etcd+tls:// URL."""
        if not self.metadata.startswith(ETCD_SCHEMES):
            return None
        from partlog.controller.etcd_layout import parse_etcd_url

        return parse_etcd_url(self.metadata)

    @property
    def cluster_file(self) -> str | None:
        """The static cluster TOML when ``metadata`` is a path."""
        if not self.metadata or self.metadata.startswith((CONTROLLER_SCHEME, *ETCD_SCHEMES)):
            return None
        return self.metadata

    @property
    def listen_address(self) -> tuple[str, int] | None:
        return parse_host_port(self.listen, port_zero_ok=True) if self.listen else None

    def replace(self, **changes: Any) -> WalmgrConfig:
        """A copy with ``changes`` (validated like a new config)."""
        unknown = set(changes) - _KEYS
        if unknown:
            raise WalmgrConfigError(f"unknown keys {sorted(unknown)}")
        _check_explicit_prefix(changes.get("store", self.store), changes.get("prefix"))
        return dataclasses.replace(self, **changes)

    @classmethod
    def for_cli(cls, store: str, registry: str, **overrides: Any) -> WalmgrConfig:
        """A config for a one-off command (``--store URL --registry DIR``)."""
        unknown = set(overrides) - _KEYS
        if unknown:
            raise WalmgrConfigError(f"unknown keys {sorted(unknown)}")
        _check_explicit_prefix(store, overrides.get("prefix"))
        return cls(store=store, registry=registry, **overrides)


_KEYS = frozenset(f.name for f in dataclasses.fields(WalmgrConfig))


def _toml_key(field_name: str) -> str:
    """How the TOML file spells a field (``scan_engine`` is ``scan.engine``)."""
    for table_key, name in _SCAN_TABLE.items():
        if name == field_name:
            return f"scan.{table_key}"
    return field_name


_REQUIRED = ("store", "registry")


def _check_explicit_prefix(store: Any, prefix: Any) -> None:
    """A prefix given explicitly must agree with the store URL's path even
    when it is the default (``__post_init__`` cannot tell the two apart)."""
    if not isinstance(store, str) or not isinstance(prefix, str):
        return  # __post_init__ reports the type
    try:
        _, url_prefix = split_store_url(store)
    except ValueError:
        return  # __post_init__ reports it, naming the key
    if url_prefix and prefix.strip("/") != url_prefix:
        raise WalmgrConfigError(
            f"{prefix!r} disagrees with the path of the store URL {store!r} ({url_prefix!r}); give one",
            key="prefix",
        )


def load_config(path: str | os.PathLike[str]) -> WalmgrConfig:
    """Read a TOML config; :class:`WalmgrConfigError` names the file and key.

    Unknown keys are refused (a misspelt ``grace_ms`` must not silently fall
    back to its default).
    """
    where = os.fspath(path)
    try:
        with open(where, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise WalmgrConfigError(f"cannot read: {e.strerror or e}", path=where) from e
    except tomllib.TOMLDecodeError as e:
        raise WalmgrConfigError(f"not valid TOML: {e}", path=where) from e
    except UnicodeDecodeError as e:
        raise WalmgrConfigError(f"not UTF-8 at byte {e.start}", path=where) from e
    scan = doc.pop("scan", {})
    if not isinstance(scan, dict):
        raise WalmgrConfigError("must be a table ([scan] with engine, spark_master)", key="scan", path=where)
    known = sorted((_KEYS - set(_SCAN_TABLE.values())) | {f"scan.{k}" for k in _SCAN_TABLE})
    unknown = sorted(set(doc) - _KEYS) + sorted(set(doc) & set(_SCAN_TABLE.values()))
    unknown += [f"scan.{k}" for k in sorted(set(scan) - set(_SCAN_TABLE))]
    if unknown:
        raise WalmgrConfigError(f"unknown key (known: {', '.join(known)})", key=unknown[0], path=where)
    for name, value in scan.items():
        doc[_SCAN_TABLE[name]] = value
    for name in _REQUIRED:
        if name not in doc:
            raise WalmgrConfigError("missing (required)", key=name, path=where)
    try:
        _check_explicit_prefix(doc["store"], doc.get("prefix"))
        return WalmgrConfig(**doc)
    except WalmgrConfigError as e:
        raise WalmgrConfigError(e.problem, key=e.key, path=where) from e
