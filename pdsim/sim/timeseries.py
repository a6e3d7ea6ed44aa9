"""Per-instance time series, sampled every `timeseries_interval_s` of simulated time.

One row per (sample time, instance): queue lengths by queue name (0 where the role has no such
queue), KV used fraction (evictable cache blocks count as free), the batch size of the current
iteration, and the utilisation of the instance's NIC egress and ingress at that instant.
Rows are packed into one `bytearray` (8 bytes a value, one `struct` pack per row) and become a
DataFrame at the end.
"""

from __future__ import annotations

import struct
from collections.abc import Generator, Sequence
from typing import Any, Final

import numpy as np
import pandas as pd
import simpy

from pdsim.sim.clock import now_s
from pdsim.sim.instance import QUEUES, InstanceBase
from pdsim.sim.network import Network

COLUMNS = (
    "time_s", "instance_id", "role", "instance",
    *(f"queue_{q}" for q in QUEUES),
    "kv_used_fraction", "batch_size", "nic_out_utilization", "nic_in_utilization",
)
# a row: time, the instance's position, its queue counts (InstanceBase.queue_counts), KV used
# fraction, batch size, NIC out and in utilisation; native byte order, no padding
_ROW_FORMAT: Final = f"dq{len(QUEUES)}qdqdd"
_ROW_DTYPE: Final = np.dtype([
    ("time_s", np.float64), ("position", np.int64), ("queues", np.int64, (len(QUEUES),)),
    ("kv_used_fraction", np.float64), ("batch_size", np.int64),
    ("nic_out_utilization", np.float64), ("nic_in_utilization", np.float64),
])


class TimeseriesSampler:
    def __init__(self, env: simpy.Environment, network: Network, instances: Sequence[InstanceBase],
                 interval_s: float) -> None:
        self.env = env
        self.network = network
        self.instances = list(instances)
        self.interval_s = interval_s
        # each row (_ROW_FORMAT), row after row; instance identity is its position, expanded at the end
        self.rows = bytearray()
        self._packings: dict[int, struct.Struct] = {}
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
        """One row per instance at `now` (all of them packed in one call)."""
        now, network = now_s(self.env), self.network
        values: list[Any] = []
        for position, inst in enumerate(self.instances):
            total = self.kv_total_tokens[position]
            placement = inst.placement
            values.append(now)
            values.append(position)
            values.extend(inst.queue_counts())
            values.append(inst.kv_used_tokens() / total if total > 0 else 0.0)
            values.append(inst.batch_size)
            values.append(network.utilization(placement.nic_out))
            values.append(network.utilization(placement.nic_in))
        self.rows += self._rows_struct(len(self.instances)).pack(*values)

    def _rows_struct(self, instances: int) -> struct.Struct:
        """The packing of `instances` rows (one per instance count: scaling adds instances)."""
        packing = self._packings.get(instances)
        if packing is None:
            packing = self._packings[instances] = struct.Struct("=" + _ROW_FORMAT * instances)
        return packing

    def to_frame(self) -> pd.DataFrame:
        rows = np.frombuffer(self.rows, dtype=_ROW_DTYPE) if self.rows else np.zeros(0, _ROW_DTYPE)
        pos = rows["position"]
        insts = self.instances
        columns: dict[str, Any] = {
            "time_s": _column(rows, "time_s"),
            "instance_id": np.array([i.index for i in insts], dtype=np.int64)[pos],
            "role": pd.Series(np.array([i.role for i in insts] or [""], dtype=object)[pos].tolist()),
            "instance": pd.Series(np.array([i.name for i in insts] or [""], dtype=object)[pos].tolist()),
        }
        for k, q in enumerate(QUEUES):
            columns[f"queue_{q}"] = np.ascontiguousarray(rows["queues"][:, k])
        for name in ("kv_used_fraction", "batch_size", "nic_out_utilization", "nic_in_utilization"):
            columns[name] = _column(rows, name)
        return pd.DataFrame(columns, columns=list(COLUMNS))


def _column(rows: np.ndarray, name: str) -> np.ndarray:
    return np.ascontiguousarray(rows[name])
