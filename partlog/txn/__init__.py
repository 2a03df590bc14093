"""Kafka's transaction coordinator, sans-IO (floor 3, beside the group
membership core): the state machine of transactional ids
(:mod:`partlog.txn.coordinator`) and the records of ``__transaction_state``
(:mod:`partlog.txn.log`).  The asyncio shell is
:mod:`partlog.kafka_front.txn_coordinator`."""
