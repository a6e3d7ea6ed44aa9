"""What one fidelity loop is asked to do (`FidelityOptions`): the served shape, the workload, the
simulated model and where the inputs come from (a fresh profile, a reused one, a finished run).
loop.py runs it; runs.py reads a finished run's recorded options back into one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from analysis.fidelity.real import ServeShape

SIM_MODEL = "smollm2_135m"


@dataclass(frozen=True)
class FidelityOptions:
    out_dir: Path
    shape: ServeShape = field(default_factory=ServeShape)
    workload_overrides: tuple[str, ...] = ()  # pdsim overrides: scenario.*, slo.*, seed
    sim_overrides: tuple[str, ...] = ()  # extra pdsim overrides for the simulation only
    sim_model: str = SIM_MODEL  # pdsim model config matching the served model
    profile_dir: Path | None = None  # reuse this profile (profile.csv + engine.json) instead
    quick_profile: bool = False
    profile_grid_args: tuple[str, ...] = ()  # pdreal profile grid flags (--prefill-tokens 128,512 ...)
    profile_repeats: int = 0
    num_probes: int = 8
    pilot_requests: int = 0  # loaded probe before the replay (pilot.py); 0 = none
    report: bool = True
    from_run: Path | None = None  # re-simulate this finished run folder (no profile, serve or replay)
    scale_from: Path | None = None  # served slowdown from this other run's fidelity.json (same profile)

    def __post_init__(self) -> None:
        for name in ("num_probes", "pilot_requests", "profile_repeats"):
            if getattr(self, name) < 0:
                raise ValueError(f"fidelity {name} must be >= 0, got {getattr(self, name)}")
