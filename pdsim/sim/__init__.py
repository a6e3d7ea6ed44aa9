"""The simpy model of PD-disaggregated (and colocated) serving; entry point `simulate`.

Modules, one mechanism each: router.py (dual dispatch), prefill.py, decode.py, colocated.py
(instances and their queues), kv_pool.py + prompt_kv.py (KV memory over pdsim.policy's prefix
cache), network.py + topology.py (max-min fair flows over NICs/NVLink), transfer.py (KVPoll, page-granular
chunk sends), faults.py, timeseries.py, cluster.py (the cluster: request lifecycles), run.py (simulate, checks).
Every scheduling decision comes from the pdsim.policy planners (the calls pdreal's engines make);
the instances execute them in simulated time.
"""

from pdsim.sim.run import InvariantError, SimResult, SimulationStuck, check_invariants, simulate

__all__ = ["InvariantError", "SimResult", "SimulationStuck", "check_invariants", "simulate"]
