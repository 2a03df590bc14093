"""The gRPC channel partlog's aetcd client talks to etcd over: plaintext
or TLS (``etcd+tls://``, optionally with a client certificate), and etcd's
user/password authentication (``user=``), from an :class:`EtcdTarget`.

aetcd opens plaintext channels only and authenticates once at connect:
etcd forgets a token after ``--auth-token-ttl`` idle seconds (simple
tokens, 300 by default) or at its expiry (JWT), and aetcd would then fail
every call for good.  So :class:`EtcdClient` is aetcd's client on a channel
made here, and the token lives in a gRPC interceptor instead: it is sent
with every call, fetched (``Authenticate``) before the first, and renewed
when etcd answers a unary call with "invalid auth token", which is then
retried once.  A stream (watch, lease keep-alive) carries the token it was
opened with; partlog reopens streams after a failed unary read, which
renews the token first.

Files (CA, certificate, key, password) are read when the client is made;
a missing or unreadable one, or a wrong user or password, is a
:class:`MetadataError` line naming it: retrying cannot help.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

import aetcd
import aetcd.exceptions
import aetcd.rpc
import aetcd.watcher
import grpc
import grpc.aio

from partlog.controller.cluster_meta import MetadataError
from partlog.controller.etcd_url import EtcdAuth, EtcdTarget, EtcdTls

__all__ = ["INVALID_AUTH_TOKEN", "EtcdAuthError", "EtcdClient", "new_etcd_client", "read_password"]

# What etcd answers (UNAUTHENTICATED) to a call whose token it forgot
# (rpctypes.ErrGRPCInvalidAuthToken).
INVALID_AUTH_TOKEN = "etcdserver: invalid auth token"
_AUTHENTICATE = "/etcdserverpb.Auth/Authenticate"
_WATCH = "/etcdserverpb.Watch/Watch"
# A PEM file or a password file larger than this is not one.
CREDENTIAL_FILE_BYTES_MAX = 1024 * 1024


class EtcdAuthError(MetadataError):
    """etcd refused the user and password."""


def _read_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(CREDENTIAL_FILE_BYTES_MAX + 1)
    except OSError as e:
        raise MetadataError(f"etcd {what} file {path!r}: {e.strerror or e}") from None
    if not data or len(data) > CREDENTIAL_FILE_BYTES_MAX:
        raise MetadataError(f"etcd {what} file {path!r}: empty or over {CREDENTIAL_FILE_BYTES_MAX} bytes")
    return data


def _channel_credentials(tls: EtcdTls) -> Any:
    return grpc.ssl_channel_credentials(
        root_certificates=_read_file(tls.ca, "CA") if tls.ca else None,
        private_key=_read_file(tls.key, "client key") if tls.key else None,
        certificate_chain=_read_file(tls.cert, "client certificate") if tls.cert else None,
    )


def read_password(auth: EtcdAuth) -> str:
    """The password: the first line of ``password_file``, or the value of
    the environment variable ``password_env``."""
    if auth.password_file:
        raw = _read_file(auth.password_file, "password")
        try:
            password = raw.decode().splitlines()[0] if raw.strip() else ""
        except UnicodeDecodeError:
            raise MetadataError(f"etcd password file {auth.password_file!r}: not UTF-8") from None
        if not password:
            raise MetadataError(f"etcd password file {auth.password_file!r}: the first line is empty")
        return password
    password = os.environ.get(auth.password_env, "")
    if not password:
        raise MetadataError(f"etcd password: environment variable {auth.password_env} is not set or empty")
    return password


class _Token:
    """etcd's token for one user, shared by the calls of one channel."""

    def __init__(self, user: str, password: str, timeout_s: float) -> None:
        self.user = user
        self._password = password
        self._timeout_s = timeout_s
        self.value = ""
        self.renewals = 0  # Authenticate calls made (the first one included)
        self.channel: Any = None  # set once the channel exists
        # Run after a unary call found the token forgotten and renewed it.
        self.on_forgotten: Callable[[], Awaitable[None]] | None = None
        self._lock = asyncio.Lock()

    async def current(self) -> str:
        if not self.value:
            await self.renew("")
        return self.value

    async def renew(self, stale: str) -> bool:
        """A new token unless another call renewed ``stale`` already
        (False)."""
        async with self._lock:
            if self.value != stale:
                return False
            request = aetcd.rpc.AuthenticateRequest(name=self.user, password=self._password)
            try:
                resp = await aetcd.rpc.AuthStub(self.channel).Authenticate(request, timeout=self._timeout_s)
            except grpc.aio.AioRpcError as e:
                # etcd's ErrGRPCAuthFailed ("authentication failed, invalid
                # user ID or password") and ErrGRPCAuthNotEnabled.
                if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    raise EtcdAuthError(f"etcd user {self.user!r}: {e.details()}") from None
                raise
            self.value = str(resp.token)
            self.renewals += 1
            return True


def _with_token(details: Any, token: str) -> Any:
    metadata = grpc.aio.Metadata(*((k, v) for k, v in (details.metadata or ()) if k != "token"))
    metadata.add("token", token)
    return details._replace(metadata=metadata)


def _method(details: Any) -> str:
    m = details.method
    return m.decode() if isinstance(m, bytes) else str(m)


class _TokenInterceptor(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Sends the token with every unary call; renews it and retries the
    call once when etcd forgot it."""

    def __init__(self, token: _Token) -> None:
        self.token = token

    async def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        if _method(details) == _AUTHENTICATE:
            return await continuation(details, request)
        token = await self.token.current()
        call = await continuation(_with_token(details, token), request)
        try:
            await call
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNAUTHENTICATED or e.details() != INVALID_AUTH_TOKEN:
                raise
            if await self.token.renew(token) and self.token.on_forgotten is not None:
                await self.token.on_forgotten()
            return await continuation(_with_token(details, self.token.value), request)
        return call


class _StreamTokenInterceptor(grpc.aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    """Sends the token when a stream opens (etcd's streams partlog uses,
    Watch and LeaseKeepAlive, are bidirectional; gRPC takes one kind of
    interceptor per object)."""

    def __init__(self, token: _Token) -> None:
        self.token = token

    async def intercept_stream_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        if _method(details) == _WATCH:
            # etcd checks a watch stream's token at each watch it creates
            # on it, and refuses one silently (aetcd never sees the
            # refusal) when the token is forgotten: streams are opened
            # rarely (once, and after a failure), each on a fresh token.
            await self.token.renew(self.token.value)
        return await continuation(_with_token(details, await self.token.current()), request)


class EtcdClient(aetcd.Client):  # type: ignore[misc]
    """aetcd's client on a channel of ours (see the module doc).  Only
    :meth:`connect` differs from aetcd's: it opens our channel and leaves
    the token to the interceptors (aetcd's would open a plaintext channel
    and authenticate once); the rest of its copy is the stubs and watcher
    aetcd's makes.  It leans on aetcd 1.0's attributes (``_connected``,
    ``_options``, ``_timeout``, the watcher's ``_terminate_stream``), which
    tests/system/test_etcd_tls.py exercises."""

    def __init__(self, target: str, timeout_s: float, options: dict[str, Any], credentials: Any, token: _Token | None):
        host, _, port = target.rpartition(":")
        super().__init__(host=host, port=int(port), timeout=timeout_s, options=options)
        self._target = target
        self._credentials = credentials
        self.token = token

    async def connect(self) -> None:
        # No await before the end: concurrent first calls cannot interleave.
        if self._connected.is_set():
            return
        options = list(self._options.items())
        token = self.token
        interceptors = [] if token is None else [_TokenInterceptor(token), _StreamTokenInterceptor(token)]
        if self._credentials is None:
            channel = grpc.aio.insecure_channel(self._target, options=options, interceptors=interceptors)
        else:
            creds = self._credentials
            channel = grpc.aio.secure_channel(self._target, creds, options=options, interceptors=interceptors)
        if self.token is not None:
            self.token.channel = channel
            self.token.value = ""  # a new channel authenticates afresh
            self.token.on_forgotten = self._reopen_watches
        self.channel = channel
        self.kvstub = aetcd.rpc.KVStub(channel)
        self.clusterstub = aetcd.rpc.ClusterStub(channel)
        self.leasestub = aetcd.rpc.LeaseStub(channel)
        self.maintenancestub = aetcd.rpc.MaintenanceStub(channel)
        self._watcher = aetcd.watcher.Watcher(aetcd.rpc.WatchStub(channel), timeout=self._timeout)
        self._connected.set()

    async def _reopen_watches(self) -> None:
        """End the watch stream, opened on a token etcd has now forgotten:
        a watch created on it would be refused silently.  Its watches fail
        (an :data:`ETCD_ERRORS` error) and are made again on a new stream.
        aetcd's shutdown would end them without an error, as if done."""
        if self._watcher is not None:
            error = aetcd.exceptions.UnauthenticatedError("etcd forgot the token: watches are made again")
            await self._watcher._terminate_stream(error)


def new_etcd_client(target: EtcdTarget, grpc_target: str, timeout_s: float, options: dict[str, Any]) -> EtcdClient:
    """The client for ``target`` on ``grpc_target`` (its members' resolved
    addresses); reads its files now (:class:`MetadataError` names a bad one)."""
    credentials = None
    if target.tls is not None:
        credentials = _channel_credentials(target.tls)
        # The channel's target names addresses, not hosts: the members'
        # certificates are checked against one name.
        name = target.tls.server_name or target.endpoints[0][0].strip("[]")
        options = {**options, "grpc.ssl_target_name_override": name, "grpc.default_authority": name}
    token = None
    if target.auth is not None:
        token = _Token(target.auth.user, read_password(target.auth), timeout_s)
    return EtcdClient(grpc_target, timeout_s, options, credentials, token)
