"""Fetch from the nearest replica (KIP-392), as KIP-1163 asks of diskless
topics: a consumer that names its AZ (Fetch v11+'s ``rack_id``, librdkafka's
``client.rack``) is sent to an in-sync replica in that AZ with
``preferred_read_replica``, and fetches there directly, instead of this
broker forwarding its fetch (two hops, one of them across AZs).

Kafka's ``RackAwareReplicaSelector``, on partlog's routing (any broker
answers for any partition): among the partition's ISR members in the
client's AZ, the leader if it is one, else the first in ISR order.  This
broker redirects only when it is not one of them; with none in that AZ
there is no preference (-1), and the fetch is served or forwarded as
before (out-of-sync replicas are never preferred).  On unless the
listener's ``rack_aware_replica_selector`` is off: Kafka leaves
``replica.selector.class`` unset by default, but every partlog topic is
diskless, and KIP-1163 sends diskless consumers to their own AZ.  Sans-IO."""

from __future__ import annotations

from collections.abc import Callable

from partlog.controller.cluster_meta import NO_LEADER, PartitionInfo

__all__ = ["NO_PREFERENCE", "preferred_read_replica"]

NO_PREFERENCE = -1


def preferred_read_replica(
    info: PartitionInfo | None, az_of: Callable[[int], str | None], client_az: str | None, me: int
) -> int:
    """The broker the client in ``client_az`` should fetch ``info`` from,
    or NO_PREFERENCE (serve it here, or forward as usual).  ``az_of``: a
    live broker's AZ, None for one the metadata does not list."""
    if info is None or info.leader == NO_LEADER or not client_az:
        return NO_PREFERENCE
    near = [r for r in info.isr if az_of(r) == client_az]
    if not near or me in near:
        return NO_PREFERENCE
    return info.leader if info.leader in near else near[0]
