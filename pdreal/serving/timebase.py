"""One timebase across processes and machines.

Every server stamps times with `time.monotonic()`. Processes on one Linux boot share that clock
(CLOCK_MONOTONIC is system-wide), which `clock_id()` (the kernel boot id plus host name) tells
apart; across machines a `ClockSync` estimates the offset from request round trips (the sample
with the smallest round trip wins, as NTP does), so that the router can put both halves of a
request on its own clock and the replay client can put the router's times on its clock.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def clock_id() -> str:
    """Equal for two processes exactly when their `time.monotonic()` values are comparable."""
    try:
        boot = BOOT_ID_PATH.read_text().strip()
    except OSError:
        boot = f"pid{os.getpid()}"  # unknown: never equal to another process's id
    return f"{socket.gethostname()}/{boot}"


def now_s() -> float:
    return time.monotonic()


@dataclass
class ClockSync:
    """Offset of a remote monotonic clock: remote_time = local_time + offset_s."""

    local_id: str
    remote_id: str = ""
    offset_s: float = 0.0
    round_trip_s: float = float("inf")

    @property
    def same_clock(self) -> bool:
        return self.remote_id == self.local_id

    def add_sample(self, remote_id: str, sent_s: float, remote_s: float, received_s: float) -> None:
        """One round trip: sent at `sent_s` (local), stamped `remote_s` there, back at `received_s`."""
        if remote_id != self.remote_id:
            self.remote_id, self.round_trip_s = remote_id, float("inf")
        if self.same_clock:
            self.offset_s, self.round_trip_s = 0.0, 0.0
            return
        rtt = received_s - sent_s
        if rtt <= self.round_trip_s:
            self.offset_s, self.round_trip_s = remote_s - (sent_s + received_s) / 2, rtt

    def to_local(self, remote_s: float) -> float:
        return remote_s - self.offset_s
