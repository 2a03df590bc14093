"""The metadata URL of a cluster kept in etcd, parsed into an
:class:`EtcdTarget`: the members, the key prefix, and how to reach them
(plaintext or TLS, with or without etcd's user/password authentication)::

    etcd://HOST:PORT[,HOST:PORT...][/PREFIX][?QUERY]
    etcd+tls://HOST:PORT[,HOST:PORT...][/PREFIX][?QUERY]

The query is ``key=value`` pairs joined by ``&`` (values percent-decoded):

* ``ca=PATH``: the PEM bundle of CAs trusted to sign the members'
  certificates (default: the system's roots); ``cert=PATH&key=PATH``: this
  process's client certificate and key (etcd's ``--client-cert-auth``);
  ``server_name=NAME``: the name every member's certificate is checked
  against (default: the first HOST).  These need ``etcd+tls://``.
* ``user=NAME`` with ``password_file=PATH`` (the file's first line) or
  ``password_env=VAR`` (an environment variable): etcd's authentication.
  A password itself is never in the URL: URLs are logged and are in argv.

Sans-IO: nothing is read here (files are read when the channel is made, by
:mod:`partlog.controller.etcd_channel`).  Every error is one
:class:`MetadataError` line naming the URL and what is wrong in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from partlog.controller.cluster_meta import MetadataError
from partlog.limits import PORT_MAX

__all__ = [
    "ETCD_ENDPOINTS_MAX",
    "ETCD_PREFIX_DEFAULT",
    "ETCD_SCHEME",
    "ETCD_SCHEMES",
    "ETCD_TLS_SCHEME",
    "EtcdAuth",
    "EtcdTarget",
    "EtcdTls",
    "parse_etcd_url",
]

ETCD_SCHEME = "etcd://"
ETCD_TLS_SCHEME = "etcd+tls://"
ETCD_SCHEMES = (ETCD_SCHEME, ETCD_TLS_SCHEME)
# The prefix a URL without one gets.
ETCD_PREFIX_DEFAULT = "/partlog"
# An etcd cluster has a handful of members; a URL naming more is a mistake.
ETCD_ENDPOINTS_MAX = 16
# Keys stay well under etcd's limits with room for the longest topic name.
ETCD_PREFIX_CHARS_MAX = 200
# A query value (a path, a name) longer than this is a mistake.
ETCD_QUERY_VALUE_CHARS_MAX = 4096
_PREFIX = re.compile(r"(/[A-Za-z0-9._-]+)+")
_HOST = re.compile(r"[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TLS_KEYS = ("ca", "cert", "key", "server_name")
_AUTH_KEYS = ("user", "password_file", "password_env")
_URL_FORM = "etcd[+tls]://HOST:PORT[,HOST:PORT...][/PREFIX][?ca=PATH&cert=PATH&key=PATH&user=NAME&password_file=PATH]"


@dataclass(frozen=True, slots=True)
class EtcdTls:
    """TLS to the members: files are PEM paths ("" : none given)."""

    ca: str = ""  # "": the system's trusted roots
    cert: str = ""  # with key: the client certificate
    key: str = ""
    server_name: str = ""  # "": the first endpoint's host


@dataclass(frozen=True, slots=True)
class EtcdAuth:
    """etcd's user/password authentication; the password is read from
    exactly one of a file and an environment variable."""

    user: str
    password_file: str = ""
    password_env: str = ""


@dataclass(frozen=True, slots=True)
class EtcdTarget:
    """Where a cluster's metadata lives: etcd members and the key prefix,
    and how to reach them (``tls`` None: plaintext; ``auth`` None: no
    authentication)."""

    endpoints: tuple[tuple[str, int], ...]
    prefix: str
    tls: EtcdTls | None = None
    auth: EtcdAuth | None = None

    def url(self) -> str:
        hosts = ",".join(f"{h}:{p}" for h, p in self.endpoints)
        scheme = ETCD_SCHEME if self.tls is None else ETCD_TLS_SCHEME
        pairs = [
            *((k, getattr(self.tls, k)) for k in _TLS_KEYS if self.tls is not None),
            *((k, getattr(self.auth, k)) for k in _AUTH_KEYS if self.auth is not None),
        ]
        query = "&".join(f"{k}={quote(v, safe='/._-~:')}" for k, v in pairs if v)
        return f"{scheme}{hosts}{self.prefix}{'?' + query if query else ''}"


def parse_etcd_url(url: str) -> EtcdTarget:
    """See the module doc; the prefix defaults to ``/partlog``.  Raises
    :class:`MetadataError` naming what is wrong."""
    if not isinstance(url, str) or not url.startswith(ETCD_SCHEMES):
        raise MetadataError(f"metadata {str(url)!r:.80}: not an etcd URL ({_URL_FORM})")
    tls = url.startswith(ETCD_TLS_SCHEME)
    rest, _, query = url.removeprefix(ETCD_TLS_SCHEME if tls else ETCD_SCHEME).partition("?")
    hosts, slash, prefix = rest.partition("/")
    prefix = slash + prefix if slash else ETCD_PREFIX_DEFAULT
    if len(prefix) > ETCD_PREFIX_CHARS_MAX or not _PREFIX.fullmatch(prefix):
        raise MetadataError(
            f"metadata {url!r:.80}: prefix {prefix!r:.60} must be /NAME[/NAME...] of [A-Za-z0-9._-], "
            f"at most {ETCD_PREFIX_CHARS_MAX} characters"
        )
    if any(part in (".", "..") for part in prefix.split("/")):
        raise MetadataError(f"metadata {url!r:.80}: prefix {prefix!r:.60} has a . or .. segment")
    endpoints: list[tuple[str, int]] = []
    for item in hosts.split(","):
        host, colon, port = item.rpartition(":")
        if not colon or not _HOST.fullmatch(host) or not port.isdigit() or not 0 < int(port) <= PORT_MAX:
            raise MetadataError(f"metadata {url!r:.80}: endpoint {item!r:.60} is not HOST:PORT")
        endpoints.append((host, int(port)))
        if len(endpoints) > ETCD_ENDPOINTS_MAX:
            raise MetadataError(f"metadata {url!r:.80}: more than {ETCD_ENDPOINTS_MAX} endpoints")
    params = _parse_query(url, query, tls) if query else {}
    auth = None
    if "user" in params:
        auth = EtcdAuth(params["user"], params.get("password_file", ""), params.get("password_env", ""))
    return EtcdTarget(
        tuple(endpoints),
        prefix,
        EtcdTls(*(params.get(k, "") for k in _TLS_KEYS)) if tls else None,
        auth,
    )


def _parse_query(url: str, query: str, tls: bool) -> dict[str, str]:
    where = f"metadata {url!r:.80}"
    params: dict[str, str] = {}
    for item in query.split("&"):
        key, eq, raw = item.partition("=")
        if key == "password":
            # The URL is not echoed: it holds the password.
            raise MetadataError("metadata: a password is never given in the URL: use password_file= or password_env=")
        if key not in _TLS_KEYS + _AUTH_KEYS:
            raise MetadataError(f"{where}: unknown query key {key!r:.40} (known: {', '.join(_TLS_KEYS + _AUTH_KEYS)})")
        value = unquote(raw)
        if not eq or not value or len(value) > ETCD_QUERY_VALUE_CHARS_MAX or not value.isprintable():
            raise MetadataError(f"{where}: {key}= needs a printable value")
        if key in params:
            raise MetadataError(f"{where}: {key}= is given twice")
        if key in _TLS_KEYS and not tls:
            raise MetadataError(f"{where}: {key}= needs {ETCD_TLS_SCHEME}")
        params[key] = value
    if ("cert" in params) != ("key" in params):
        raise MetadataError(f"{where}: cert= and key= go together")
    if "password_env" in params and not _ENV_NAME.fullmatch(params["password_env"]):
        raise MetadataError(f"{where}: password_env= must name an environment variable ([A-Za-z_][A-Za-z0-9_]*)")
    secrets = ("password_file" in params) + ("password_env" in params)
    if "user" in params and secrets != 1:
        raise MetadataError(f"{where}: user= needs exactly one of password_file= and password_env=")
    if "user" not in params and secrets:
        raise MetadataError(f"{where}: password_file= and password_env= need user=")
    return params
