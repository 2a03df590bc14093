"""The Kafka listener's SASL servers (partlog.kafka_front.scram), its
principal mapping rules (partlog.kafka_front.principal) and its listener
syntax (partlog.kafka_front.listeners), sans-IO."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from partlog.kafka_front.listeners import ListenerConfigError, SecurityProtocol, parse_listeners
from partlog.kafka_front.principal import NoMatchingRule, PrincipalMapper, rfc2253
from partlog.kafka_front.scram import (
    SASL_TOKEN_BYTES_MAX,
    PlainServer,
    SaslFailure,
    ScramCredential,
    ScramServer,
    StaticCredentials,
)

# RFC 7677 section 3's exchange.
_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
_CRED = ScramCredential.from_password("SCRAM-SHA-256", "pencil", _SALT, 4096)
_CREDS = StaticCredentials({("user", "SCRAM-SHA-256"): _CRED})
_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
_NONCE = "rOprNGfwEbeRWgbNEkqO" + _SERVER_NONCE


def test_scram_sha_256_replays_rfc_7677() -> None:
    s = ScramServer("SCRAM-SHA-256", _CREDS, _SERVER_NONCE)
    first = s.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == f"r={_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode()
    final = s.step(f"c=biws,r={_NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode())
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert s.user == "user"
    with pytest.raises(SaslFailure):
        s.step(b"c=biws")  # nothing after the end


def test_scram_wrong_proof_unknown_user_and_wrong_nonce_fail() -> None:
    s = ScramServer("SCRAM-SHA-256", _CREDS, _SERVER_NONCE)
    s.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    proof = base64.b64encode(bytes(32)).decode()
    with pytest.raises(SaslFailure):
        s.step(f"c=biws,r={_NONCE},p={proof}".encode())
    assert s.user is None
    with pytest.raises(SaslFailure):
        ScramServer("SCRAM-SHA-256", _CREDS, "x").step(b"n,,n=bob,r=abc")
    s = ScramServer("SCRAM-SHA-256", _CREDS, _SERVER_NONCE)
    s.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(SaslFailure):
        s.step(b"c=biws,r=other,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")


@given(st.lists(st.binary(max_size=SASL_TOKEN_BYTES_MAX + 10), min_size=1, max_size=4))
def test_hostile_scram_tokens_only_ever_fail_the_exchange(tokens: list[bytes]) -> None:
    """Whatever a client sends, the server answers or raises SaslFailure
    (one connection lost), and never authenticates without the proof."""
    s = ScramServer("SCRAM-SHA-256", _CREDS, _SERVER_NONCE)
    for t in tokens:
        try:
            out = s.step(t)
        except SaslFailure:
            break
        assert len(out) < 512
    assert s.user is None


@given(st.text(max_size=64), st.text(max_size=64))
def test_hostile_client_final_after_a_good_first_fails_without_authenticating(c: str, p: str) -> None:
    s = ScramServer("SCRAM-SHA-256", _CREDS, _SERVER_NONCE)
    s.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(SaslFailure):
        s.step(f"c={c},r={_NONCE},p={p}".encode())
    assert s.user is None


def test_plain_checks_the_password_against_the_scram_credential() -> None:
    assert PlainServer(_CREDS).step(b"\0user\0pencil") == b""
    ok = PlainServer(_CREDS)
    ok.step(b"user\0user\0pencil")
    assert ok.user == "user"
    for token in (b"\0user\0wrong", b"\0nobody\0pencil", b"other\0user\0pencil", b"\0user", b"\xff\0user\0pencil"):
        s = PlainServer(_CREDS)
        with pytest.raises(SaslFailure):
            s.step(token)
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
