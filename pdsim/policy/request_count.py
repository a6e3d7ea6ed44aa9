"""Least-loaded routing by request count (DistServe's simulator's global scheduler).

SGLang-style `least_loaded` counts tokens (queued prompt tokens plus KV in use); DistServe
counts requests: on the prefill side the requests routed there whose prefill has not ended, on
the decode (and colocated) side those plus the running batch. Ties break on instance_id.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pdsim.policy.routing_state import RouterState
from pdsim.policy.views import ROLE_PREFILL, InstanceView, RequestView


def request_load(view: InstanceView) -> int:
    """Requests an instance holds: queued ones (prefill: including its running batch) plus,
    off the prefill side, the running batch."""
    if view.role == ROLE_PREFILL:
        return view.queued_requests
    return view.queued_requests + view.running_requests


def choose_least_requests(
    request: RequestView, views: Sequence[InstanceView], side: str, state: RouterState,
    rng: np.random.Generator,
) -> int:
    """Minimum (request_load, instance_id) over the healthy instances."""
    healthy = [v for v in views if v.healthy]
    return min(healthy, key=lambda v: (request_load(v), v.instance_id)).instance_id
