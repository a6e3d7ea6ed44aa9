"""Per-instance time series, sampled every `timeseries_interval_s` of simulated time.

One row per (sample time, instance): queue lengths by queue name (0 where the role has no such
queue), KV used fraction (evictable cache blocks count as free), the batch size of the current
iteration, and the utilisation of the instance's NIC egress and ingress at that instant.
Rows are appended to one unboxed array per column (librt.vecs: no Python object per value) and
become a DataFrame at the end.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
import pandas as pd
from librt.vecs import append, vec
from mypy_extensions import i64

from pdsim.sim.events import SimEnvironment, Wait, now_s, start, timeout
from pdsim.sim.instance import QUEUES, InstanceBase
from pdsim.sim.network import Network

COLUMNS = (
    "time_s", "instance_id", "role", "instance",
    *(f"queue_{q}" for q in QUEUES),
    "kv_used_fraction", "batch_size", "nic_out_utilization", "nic_in_utilization",
)


class TimeseriesSampler:
    def __init__(self, env: SimEnvironment, network: Network, instances: Sequence[InstanceBase],
                 interval_s: float) -> None:
        self.env = env
        self.events = env.events
        self.network = network
        self.instances = list(instances)
        self.interval_s = interval_s
        # a column each, row after row; instance identity is its position, expanded at the end
        self._time_s = vec[float]()
        self._position = vec[i64]()
        self._queues = vec[i64]()  # len(QUEUES) a row (InstanceBase.queue_counts)
        self._kv_used_fraction = vec[float]()
        self._batch_size = vec[i64]()
        self._nic_out = vec[float]()
        self._nic_in = vec[float]()
        self.kv_total_tokens = [inst.view().kv_total_tokens for inst in self.instances]
        if interval_s > 0:
            start(env, self.sample())

    def add_instance(self, inst: InstanceBase) -> None:
        """Sample `inst` too from now on (an instance built during the run, by scaling)."""
        self.instances.append(inst)
        self.kv_total_tokens.append(inst.view().kv_total_tokens)

    def sample(self) -> Generator[Wait, Any, None]:
        """simpy process; stops when nothing else is scheduled (a stuck simulation)."""
        while True:
            self.record()
            if self.env.peek() == float("inf"):
                return
            yield timeout(self.events, self.interval_s)

    def record(self) -> None:
        """One row per instance at `now`."""
        now, network = now_s(self.events), self.network
        time_s, position, queues, kv_used = self._time_s, self._position, self._queues, self._kv_used_fraction
        batch_size, nic_out, nic_in = self._batch_size, self._nic_out, self._nic_in
        for row, inst in enumerate(self.instances):
            total = self.kv_total_tokens[row]
            placement = inst.placement
            assert placement is not None, f"{inst.name} has no placement"
            time_s = append(time_s, now)
            position = append(position, row)
            q = inst.queue_counts()  # (QUEUES order; indexed, not iterated: no boxing)
            queues = append(append(append(append(queues, q[0]), q[1]), q[2]), q[3])
            queues = append(append(append(queues, q[4]), q[5]), q[6])
            kv_used = append(kv_used, inst.kv_used_tokens() / total if total > 0 else 0.0)
            batch_size = append(batch_size, inst.batch_size)
            nic_out = append(nic_out, network.utilization(placement.nic_out))
            nic_in = append(nic_in, network.utilization(placement.nic_in))
        self._time_s, self._position, self._queues, self._kv_used_fraction = time_s, position, queues, kv_used
        self._batch_size, self._nic_out, self._nic_in = batch_size, nic_out, nic_in

    def to_frame(self) -> pd.DataFrame:
        pos = np.array(self._position, dtype=np.int64)
        insts = self.instances
        columns: dict[str, Any] = {
            "time_s": np.array(self._time_s, dtype=np.float64),
            "instance_id": np.array([i.index for i in insts], dtype=np.int64)[pos],
            "role": _labels([i.role for i in insts], pos),
            "instance": _labels([i.name for i in insts], pos),
        }
        queues = np.array(self._queues, dtype=np.int64).reshape(-1, len(QUEUES))
        for k, q in enumerate(QUEUES):
            columns[f"queue_{q}"] = np.ascontiguousarray(queues[:, k])
        columns["kv_used_fraction"] = np.array(self._kv_used_fraction, dtype=np.float64)
        columns["batch_size"] = np.array(self._batch_size, dtype=np.int64)
        columns["nic_out_utilization"] = np.array(self._nic_out, dtype=np.float64)
        columns["nic_in_utilization"] = np.array(self._nic_in, dtype=np.float64)
        return pd.DataFrame(columns, columns=list(COLUMNS))


def _labels(values: list[str], pos: np.ndarray) -> pd.Series:
    """values[pos] in pandas' string dtype (the one a list of str gets), taken from the distinct
    values: no Python string built per row (~10x faster than a list of them). No rows: object
    dtype, as an empty list gets."""
    if len(pos) == 0:
        return pd.Series([], dtype=object)
    return pd.Series(pd.array(values, dtype="str").take(pos))
