"""Per-instance time series, sampled every `timeseries_interval_s` of simulated time.

One row per (sample time, instance): queue lengths by queue name (0 where the role has no such
queue), KV used fraction (evictable cache blocks count as free), the batch size of the current
iteration, and the utilisation of the instance's NIC egress and ingress at that instant.
Columns are kept as typed arrays (8 bytes a value) and become a DataFrame at the end.
"""

from __future__ import annotations

from array import array
from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import simpy

from pdsim.sim.instance import QUEUES, InstanceBase
from pdsim.sim.network import Network
from pdsim.sim.records import rows_view

COLUMNS = (
    "time_s", "instance_id", "role", "instance",
    *(f"queue_{q}" for q in QUEUES),
    "kv_used_fraction", "batch_size", "nic_out_utilization", "nic_in_utilization",
)


class TimeseriesSampler:
    def __init__(self, env: simpy.Environment, network: Network, instances: Sequence[InstanceBase],
                 interval_s: float) -> None:
        self.env = env
        self.network = network
        self.instances = list(instances)
        self.interval_s = interval_s
        # typed columns (8 bytes a value); instance identity is its position, expanded at the end
        self.times = array("d")
        self.positions = array("q")
        self.queue_rows = array("q")  # len(QUEUES) counts per row (InstanceBase.queue_counts)
        self.kv_used_fraction = array("d")
        self.batch_size = array("q")
        self.nic_out = array("d")
        self.nic_in = array("d")
        self.kv_total_tokens = [inst.view().kv_total_tokens for inst in self.instances]
        if interval_s > 0:
            env.process(self.sample())

    def add_instance(self, inst: InstanceBase) -> None:
        """Sample `inst` too from now on (an instance built during the run, by scaling)."""
        self.instances.append(inst)
        self.kv_total_tokens.append(inst.view().kv_total_tokens)

    def sample(self) -> Generator[simpy.Event, Any, None]:
        """simpy process; stops when nothing else is scheduled (a stuck simulation)."""
        while True:
            self.record()
            if self.env.peek() == float("inf"):
                return
            yield self.env.timeout(self.interval_s)

    def record(self) -> None:
        """One row per instance at `now`."""
        now, insts, network = self.env.now, self.instances, self.network
        # the arrays' methods bound once (compiled, a method call on a non-native object looks
        # its name up at every call)
        add_queues, add_kv, add_batch = self.queue_rows.extend, self.kv_used_fraction.append, self.batch_size.append
        add_out, add_in = self.nic_out.append, self.nic_in.append
        for inst, total in zip(insts, self.kv_total_tokens, strict=True):
            add_queues(inst.queue_counts())
            add_kv(inst.kv_used_tokens() / total if total > 0 else 0.0)
            add_batch(inst.batch_size)
            placement = inst.placement
            add_out(network.utilization(placement.nic_out))
            add_in(network.utilization(placement.nic_in))
        self.times.extend([now] * len(insts))
        self.positions.extend(range(len(insts)))

    def to_frame(self) -> pd.DataFrame:
        pos = np.frombuffer(self.positions, dtype=np.int64) if len(self.positions) else np.zeros(0, np.int64)
        insts = self.instances
        columns: dict[str, Any] = {
            "time_s": _floats(self.times),
            "instance_id": np.array([i.index for i in insts], dtype=np.int64)[pos],
            "role": pd.Series(np.array([i.role for i in insts] or [""], dtype=object)[pos].tolist()),
            "instance": pd.Series(np.array([i.name for i in insts] or [""], dtype=object)[pos].tolist()),
        }
        queue_rows = rows_view(self.queue_rows, np.int64, len(QUEUES))
        for k, q in enumerate(QUEUES):
            columns[f"queue_{q}"] = np.ascontiguousarray(queue_rows[:, k])
        columns.update(kv_used_fraction=_floats(self.kv_used_fraction), batch_size=_ints(self.batch_size),
                       nic_out_utilization=_floats(self.nic_out), nic_in_utilization=_floats(self.nic_in))
        return pd.DataFrame(columns, columns=list(COLUMNS))


def _floats(values: array) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def _ints(values: array) -> np.ndarray:
    return np.array(values, dtype=np.int64)
