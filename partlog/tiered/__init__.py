"""Tiered segments (issue 31, docs/design/tiered.md): Kafka's on-disk segment
format built from a partition's committed batches (:mod:`partlog.tiered.segment`,
sans-IO) and a remote storage interface shaped like KIP-405's
``RemoteStorageManager`` (:mod:`partlog.tiered.remote_storage`).

Nothing in the running system uses this package yet."""
