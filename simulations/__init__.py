"""Deterministic discrete-event simulations of multi-AZ commit fan-out.

The simulator drives the real broker core -- :class:`partlog.produce.pipeline.ProducePipeline`
(WAL buffer rotation, commit grouping per leader broker) and
:class:`partlog.store.MetadataStore` (the commits themselves) -- through a
simulated network and object store on a virtual clock.  Routing comes from
:class:`partlog.controller.cluster_meta.StaticMetadata`.  One seed gives one result.

Entry points: ``python -m simulations run|sweep|report`` (:mod:`simulations.cli`)
and :func:`simulations.runner.run_scenario`.
"""

from __future__ import annotations
