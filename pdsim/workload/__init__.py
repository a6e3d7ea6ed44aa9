"""Request sources: synthetic generators and trace loaders.

`build_workload(scenario_cfg, seed, data_dir)` is the one entry point; it returns a columnar
`Workload` whose iteration yields `Request`s in arrival order.
"""

from pdsim.workload.errors import WorkloadError
from pdsim.workload.request import Request, Workload, make_workload
from pdsim.workload.sources import SOURCES, build_workload

__all__ = ["SOURCES", "Request", "Workload", "WorkloadError", "build_workload", "make_workload"]
