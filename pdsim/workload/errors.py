"""The error every workload problem raises: one line naming the file, field and value."""

from __future__ import annotations


class WorkloadError(ValueError):
    """Bad workload input (trace file or scenario settings)."""

    def __init__(self, source: str, field: str, problem: str) -> None:
        self.source, self.field = source, field
        super().__init__(f"{source}: field {field!r}: {problem}")
