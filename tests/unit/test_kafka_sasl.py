"""The Kafka listener's SASL servers (partlog.kafka_front.scram), its
principal mapping rules (partlog.kafka_front.principal) and its listener
syntax (partlog.kafka_front.listeners), sans-IO."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partlog.kafka.scram_credential import ScramCredential
from partlog.kafka_front.listeners import ListenerConfigError, SecurityProtocol, parse_listeners
from partlog.kafka_front.principal import NoMatchingRule, PrincipalMapper, rfc2253
from partlog.kafka_front.scram import SASL_TOKEN_BYTES_MAX, PlainServer, SaslFailure, ScramServer

# RFC 7677 section 3's exchange.
_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
_CRED = ScramCredential.from_password("SCRAM-SHA-256", "pencil", _SALT, 4096)
_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
_NONCE = "rOprNGfwEbeRWgbNEkqO" + _SERVER_NONCE
_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"


def _started() -> ScramServer:
    s = ScramServer("SCRAM-SHA-256", _SERVER_NONCE)
    assert s.client_first(_FIRST) == "user"
    assert s.server_first(_CRED) == f"r={_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode()
    return s


def test_scram_sha_256_replays_rfc_7677() -> None:
    s = _started()
    final = s.client_final(f"c=biws,r={_NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode())
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert s.user == "user"
    with pytest.raises(SaslFailure):
        s.client_final(b"c=biws")  # nothing after the end


def test_scram_wrong_proof_unknown_user_and_wrong_nonce_fail() -> None:
    s = _started()
    proof = base64.b64encode(bytes(32)).decode()
    with pytest.raises(SaslFailure):
        s.client_final(f"c=biws,r={_NONCE},p={proof}".encode())
    assert s.user is None
    s = ScramServer("SCRAM-SHA-256", "x")
    s.client_first(b"n,,n=bob,r=abc")
    with pytest.raises(SaslFailure):
        s.server_first(None)  # no such user
    s = _started()
    with pytest.raises(SaslFailure):
        s.client_final(b"c=biws,r=other,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")


@given(st.binary(max_size=SASL_TOKEN_BYTES_MAX + 10), st.binary(max_size=300))
def test_hostile_scram_tokens_only_ever_fail_the_exchange(first: bytes, final: bytes) -> None:
    """Whatever a client sends, the server answers or raises SaslFailure
    (one connection lost), and never authenticates without the proof."""
    s = ScramServer("SCRAM-SHA-256", _SERVER_NONCE)
    try:
        s.client_first(first)
        assert len(s.server_first(_CRED)) < 600
        s.client_final(final)
    except SaslFailure:
        pass
    assert s.user is None


@given(st.text(max_size=64), st.text(max_size=64))
def test_hostile_client_final_after_a_good_first_fails_without_authenticating(c: str, p: str) -> None:
    s = _started()
    with pytest.raises(SaslFailure):
        s.client_final(f"c={c},r={_NONCE},p={p}".encode())
    assert s.user is None


def test_plain_checks_the_password_against_the_scram_credential() -> None:
    ok = PlainServer()
    assert ok.read(b"user\0user\0pencil") == ("user", "pencil")
    ok.check("user", "pencil", _CRED)
    assert ok.user == "user"
    for token in (b"other\0user\0pencil", b"\0user", b"\xff\0user\0pencil", b"\0\0pw", b"\0user\0"):
        with pytest.raises(SaslFailure):
            PlainServer().read(token)
    for password, cred in (("wrong", _CRED), ("pencil", None)):
        s = PlainServer()
        with pytest.raises(SaslFailure):
            s.check("user", password, cred)
        assert s.user is None


def test_principal_rules_as_kafkas_ssl_principal_mapper() -> None:
    dn = "CN=Duke,OU=JavaSoft,O=Sun Microsystems,C=US"
    assert PrincipalMapper.parse("DEFAULT").name(dn) == dn
    m = PrincipalMapper.parse("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                              "RULE:^CN=(.*?),OU=(.*?),O=(.*?),C=(.*?)$/$1/U, DEFAULT")  # fmt: skip
    assert m.name(dn) == "DUKE"
    assert m.name("CN=Duke,OU=ServiceUsers,O=Org,L=City,ST=State,C=US") == "duke@serviceusers"
    assert m.name("OU=x") == "OU=x"
    with pytest.raises(NoMatchingRule):
        PrincipalMapper.parse("RULE:^CN=(.*)$/$1/").name("OU=x")
    for bad in ("RULE:^CN=(.*)$", "NOPE", "RULE:(/x/"):
        with pytest.raises(ValueError):
            PrincipalMapper.parse(bad)


def test_rfc2253_writes_the_last_rdn_first_with_short_names_and_escapes() -> None:
    subject = ((("countryName", "US"),), (("organizationName", "A, B"),), (("commonName", "alice"),))
    assert rfc2253(subject) == "CN=alice,O=A\\, B,C=US"


def test_listeners_parse_as_kafkas() -> None:
    specs = parse_listeners("SASL_SSL://127.0.0.1:9093, PLAINTEXT://127.0.0.1:0")
    assert [(s.protocol, s.host, s.port) for s in specs] == [
        (SecurityProtocol.SASL_SSL, "127.0.0.1", 9093),
        (SecurityProtocol.PLAINTEXT, "127.0.0.1", 0),
    ]
    for bad in ("", "FOO://127.0.0.1:1", "SSL://:9093", "SSL://h:1,SSL://h:2", "PLAINTEXT://h:99999", "h:1"):
        with pytest.raises(ListenerConfigError):
            parse_listeners(bad)
