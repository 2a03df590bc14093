"""etcd over TLS with authentication (issue 29): partlog's metadata client
against a real etcd on loopback serving mutual TLS (certificates from a test
CA made here) with authentication enabled and a one-second token TTL:
a client certificate alone (etcd takes its CN as the user), user and
password, a wrong password, a server certificate from an untrusted CA, a
missing CA file, and a token etcd forgot (renewed, the call retried)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import aetcd.rpc
import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from partlog.controller.client import ControllerUnavailableError
from partlog.controller.cluster_meta import BrokerInfo, MetadataError
from partlog.controller.etcd_channel import EtcdClient
from partlog.controller.etcd_meta import EtcdMetadata
from partlog.kafka.errors import Errors

pytestmark = pytest.mark.skipif(
    shutil.which("etcd") is None, reason="etcd is not installed (scripts/test installs Debian's etcd-server)"
)


PASSWORD = "s3cret pass"  # a space: the password file's line is taken whole
START_TIMEOUT_S = 30.0
TOKEN_TTL_S = 1


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    cn: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    server: bool,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0] if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if server:
        sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(issuer[1] if issuer else key, hashes.SHA256())


def _write_ca(d: Path, name: str) -> tuple[x509.Name, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _cert(name, key, None, server=False)
    (d / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert.subject, key


def _write_leaf(d: Path, name: str, cn: str, ca: tuple[x509.Name, ec.EllipticCurvePrivateKey], *, server: bool) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    (d / f"{name}.key").write_bytes(_pem_key(key))
    (d / f"{name}.pem").write_bytes(_cert(cn, key, ca, server=server).public_bytes(serialization.Encoding.PEM))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TlsEtcd:
    """One etcd member on 127.0.0.1 serving mutual TLS (``tls``) or
    plaintext, auth enabled."""

    def __init__(self, d: Path, *, tls: bool = True) -> None:
        self.dir = d
        self.tls = tls
        ca = _write_ca(d, "ca")
        _write_ca(d, "rogue")  # trusted by nobody
        _write_leaf(d, "server", "etcd", ca, server=True)
        _write_leaf(d, "root", "root", ca, server=False)  # CN root: etcd's user "root"
        _write_leaf(d, "nobody", "nobody", ca, server=False)  # CN of no etcd user
        (d / "password").write_text(PASSWORD + "\n")
        (d / "wrong").write_text("not it\n")
        self.port, peer = _free_port(), _free_port()
        client_url, peer_url = f"http{'s' if tls else ''}://127.0.0.1:{self.port}", f"http://127.0.0.1:{peer}"
        tls_flags = ["--cert-file", str(d / "server.pem"), "--key-file", str(d / "server.key"),
                     "--trusted-ca-file", str(d / "ca.pem"), "--client-cert-auth"]  # fmt: skip
        self.log = open(d / "etcd.log", "ab")  # noqa: SIM115 - closed by close()
        self.proc = subprocess.Popen(
            [shutil.which("etcd") or "etcd", "--name", "m0", "--data-dir", str(d / "data"),
             "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", f"m0={peer_url}",
             *(tls_flags if tls else []), "--auth-token", "simple", "--auth-token-ttl", str(TOKEN_TTL_S)],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            asyncio.run(self._enable_auth())
        except BaseException:
            self.close()
            raise

    def url(self, query: str, *, prefix: str = "") -> str:
        prefix = prefix or f"/t{uuid.uuid4().hex[:12]}"
        return f"{'etcd+tls' if self.tls else 'etcd'}://127.0.0.1:{self.port}{prefix}?{query}"

    def mtls(self, ca: str = "ca", cert: str = "root") -> str:
        d = self.dir
        return f"ca={d}/{ca}.pem&cert={d}/{cert}.pem&key={d}/{cert}.key"

    async def _enable_auth(self) -> None:
        """etcdctl's ``user add root``, ``user grant-role root root``, ``auth enable``."""
        creds = grpc.ssl_channel_credentials(
            (self.dir / "ca.pem").read_bytes(),
            (self.dir / "root.key").read_bytes(),
            (self.dir / "root.pem").read_bytes(),
        )
        address = f"127.0.0.1:{self.port}"
        channel = grpc.aio.secure_channel(address, creds) if self.tls else grpc.aio.insecure_channel(address)
        async with channel:
            auth = aetcd.rpc.AuthStub(channel)
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    await auth.UserAdd(aetcd.rpc.AuthUserAddRequest(name="root", password=PASSWORD), timeout=2)
                    break
                except grpc.aio.AioRpcError:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            await auth.RoleAdd(aetcd.rpc.AuthRoleAddRequest(name="root"), timeout=5)
            await auth.UserGrantRole(aetcd.rpc.AuthUserGrantRoleRequest(user="root", role="root"), timeout=5)
            await auth.AuthEnable(aetcd.rpc.AuthEnableRequest(), timeout=5)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsEtcd]:
    e = TlsEtcd(tmp_path_factory.mktemp("etcdtls"))
    try:
        yield e
    finally:
        e.close()


@pytest.fixture(scope="module")
def plain_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsEtcd]:
    e = TlsEtcd(tmp_path_factory.mktemp("etcdplain"), tls=False)
    try:
        yield e
    finally:
        e.close()


async def _session_and_topic(url: str) -> None:
    """A broker's session (lease keep-alives, the watch, the election) and
    an admin creating a topic, both on ``url``."""
    broker = EtcdMetadata(url, BrokerInfo(1, "a", "127.0.0.1", 9001), create_cluster=True, session_timeout_ms=2_000)
    admin = EtcdMetadata(url)
    try:
        await broker.start(timeout_ms=10_000)
        await admin.start(timeout_ms=10_000)
        info = (await admin.create_topics({"t": (2, 1)}))["t"]
        assert not isinstance(info, Errors)
        assert await broker.wait_for(lambda: broker.topic("t") is not None, 10.0)  # seen through the watch
    finally:
        await broker.stop(revoke=True)
        await admin.stop()


def test_client_certificate(etcd: TlsEtcd) -> None:
    asyncio.run(_session_and_topic(etcd.url(etcd.mtls())))


def test_user_and_password(etcd: TlsEtcd, monkeypatch: pytest.MonkeyPatch) -> None:
    # The certificate's CN names no user: only the token grants anything.
    nobody = etcd.mtls(cert="nobody")
    asyncio.run(_session_and_topic(etcd.url(f"{nobody}&user=root&password_file={etcd.dir}/password")))
    monkeypatch.setenv("PARTLOG_TEST_ETCD_PASSWORD", PASSWORD)
    asyncio.run(_session_and_topic(etcd.url(f"{nobody}&user=root&password_env=PARTLOG_TEST_ETCD_PASSWORD")))


def test_plaintext_user_and_password(plain_etcd: TlsEtcd) -> None:
    """etcd:// with authentication: the same token handling, no TLS."""
    asyncio.run(_session_and_topic(plain_etcd.url(f"user=root&password_file={plain_etcd.dir}/password")))
    wrong = _start_error(plain_etcd.url(f"user=root&password_file={plain_etcd.dir}/wrong"))
    assert wrong.startswith("EtcdAuthError: etcd user 'root':") and "authentication failed" in wrong, wrong


def _start_error(url: str) -> str:
    async def main() -> str:
        m = EtcdMetadata(url, create_cluster=True)
        try:
            await m.start(timeout_ms=3_000)
        except (MetadataError, ControllerUnavailableError) as e:
            return f"{type(e).__name__}: {e}"
        finally:
            await m.stop()
        raise AssertionError(f"{url} started")

    return asyncio.run(main())


def test_failures_are_one_line(etcd: TlsEtcd) -> None:
    wrong = _start_error(etcd.url(etcd.mtls() + f"&user=root&password_file={etcd.dir}/wrong"))
    assert wrong.startswith("EtcdAuthError: etcd user 'root':") and "authentication failed" in wrong, wrong
    untrusted = _start_error(etcd.url(etcd.mtls(ca="rogue")))
    assert untrusted.startswith("ControllerUnavailableError:") and "CERTIFICATE_VERIFY_FAILED" in untrusted, untrusted
    missing = _start_error(etcd.url(f"ca={etcd.dir}/nothere.pem"))
    assert missing == f"MetadataError: etcd CA file '{etcd.dir}/nothere.pem': No such file or directory", missing
    no_env = _start_error(etcd.url(etcd.mtls() + "&user=root&password_env=PARTLOG_TEST_UNSET_VARIABLE"))
    assert "PARTLOG_TEST_UNSET_VARIABLE is not set" in no_env, no_env
    for line in (wrong, untrusted, missing, no_env):
        assert "\n" not in line


def test_forgotten_token_is_renewed(etcd: TlsEtcd) -> None:
    """etcd forgets a simple token after --auth-token-ttl idle seconds: the
    next call fails with "invalid auth token", authenticates again and is
    retried, unseen by the caller."""

    async def main() -> None:
        m = EtcdMetadata(etcd.url(etcd.mtls(cert="nobody") + f"&user=root&password_file={etcd.dir}/password"),
                         create_cluster=True)  # fmt: skip
        try:
            await m.connect(timeout_ms=10_000)
            client = await m.conn.client()
            assert isinstance(client, EtcdClient) and client.token is not None
            assert client.token.renewals == 1
            await asyncio.sleep(TOKEN_TTL_S * 3)  # etcd checks TTLs each second
            assert (await client.get(m.keys.cluster_id)) is not None
            assert client.token.renewals == 2
        finally:
            await m.stop()

    asyncio.run(main())
