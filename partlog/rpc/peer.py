"""Who is at the other end of an RPC connection, for the server's
authorization hook: :class:`RpcPeer` and :data:`Authorize`.

A peer that proved the shared secret is a member of the cluster, but the
secret names nobody; a peer with a client certificate (mutual TLS) is named
by it.  As Kafka names the peers of its listeners, the principal is:

* with mutual TLS, ``User:`` and the certificate's subject mapped by the
  broker's ``ssl.principal.mapping.rules`` (the Kafka listeners' rules and
  function, :func:`partlog.kafka.principal_rules.cert_principal`);
* without TLS (the secret only, or nothing), ``User:ANONYMOUS``, as on
  Kafka's PLAINTEXT listener.

A subject no rule maps fails the connection's authentication (AUTH_FAILED,
the connection closes), as Kafka's SslAuthenticator fails it.  Pure; the
server calls :func:`peer_principal` once per connection, after the hello.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

from partlog.kafka.principal_rules import ANONYMOUS, PrincipalMapper, cert_principal


@dataclass(frozen=True, slots=True)
class RpcPeer:
    """An authenticated connection's peer: its principal and its host (the
    address it connects from, as Kafka's authorizer takes it)."""

    principal: str
    host: str


# The server's authorization hook: may this peer call this method?  Called
# for every request after its body passed its schema and before its handler
# runs; False answers CLUSTER_AUTHORIZATION_FAILED for that request.
Authorize = Callable[[RpcPeer, str], bool]


def peer_principal(ssl_object: ssl.SSLObject | None, mapper: PrincipalMapper) -> str:
    """The principal of a connection over ``ssl_object`` (None: no TLS);
    NoMatchingRule when no rule maps the certificate's subject."""
    if ssl_object is None:
        return ANONYMOUS
    return cert_principal(mapper, ssl_object.getpeercert())


__all__ = ["Authorize", "RpcPeer", "peer_principal"]
