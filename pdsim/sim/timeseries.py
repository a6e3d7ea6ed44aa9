"""Per-instance time series, sampled every `timeseries_interval_s` of simulated time.

One row per (sample time, instance): queue lengths by queue name (0 where the role has no such
queue), KV used fraction (evictable cache blocks count as free), the batch size of the current
iteration, and the utilisation of the instance's NIC egress and ingress at that instant.
Columns are kept as lists and become a DataFrame at the end.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd
import simpy

from pdsim.sim.network import Network

QUEUES = ("bootstrap", "prealloc", "transfer", "waiting", "running", "inflight", "retracted")
COLUMNS = (
    "time_s", "instance_id", "role", "instance",
    *(f"queue_{q}" for q in QUEUES),
    "kv_used_fraction", "batch_size", "nic_out_utilization", "nic_in_utilization",
)


class TimeseriesSampler:
    def __init__(self, env: simpy.Environment, network: Network, instances: Sequence[Any], interval_s: float) -> None:
        self.env = env
        self.network = network
        self.instances = list(instances)
        self.interval_s = interval_s
        self.columns: dict[str, list[Any]] = {c: [] for c in COLUMNS}
        if interval_s > 0:
            env.process(self.sample())

    def sample(self) -> Iterator:
        """simpy process; stops when nothing else is scheduled (a stuck simulation)."""
        while True:
            self.record()
            if self.env.peek() == float("inf"):
                return
            yield self.env.timeout(self.interval_s)

    def record(self) -> None:
        cols, now = self.columns, self.env.now
        for inst in self.instances:
            view = inst.view()
            queues = inst.queue_lengths()
            cols["time_s"].append(now)
            cols["instance_id"].append(inst.index)
            cols["role"].append(inst.role)
            cols["instance"].append(inst.name)
            for q in QUEUES:
                cols[f"queue_{q}"].append(queues.get(q, 0))
            cols["kv_used_fraction"].append(view.kv_used_fraction)
            cols["batch_size"].append(inst.batch_size)
            placement = inst.placement
            cols["nic_out_utilization"].append(self.network.utilization(placement.nic_out))
            cols["nic_in_utilization"].append(self.network.utilization(placement.nic_in))

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({c: pd.Series(v) for c, v in self.columns.items()}, columns=list(COLUMNS))
