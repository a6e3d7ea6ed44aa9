"""Run one hydra task (`pdsim run`, `goodput`, `plan`) on a config composed once.

`@hydra.main` composes the config twice before the task starts (once to read `hydra.mode`, once
for the run), and the CLI composed it a third time to turn a bad override into one line before
hydra made an output directory. Each composition costs ~0.13 s of CPU, a third of a small
run's start-up, and sweeps are made of small runs. Here the config is composed once with
hydra's own loader, checked with `to_config` (a bad override or value: one line, exit 2, no
output directory), and handed to hydra's `run_job` as `Hydra.run` would: the same output
directory, `.hydra/` files, logging and callbacks.

hydra's `Hydra` object and `Callbacks` are internal API; hydra-core is pinned to 1.3.x in
pyproject.toml and tests/foundation/test_cli.py runs every command through this path. Hydra's
flags (`--help`, `--cfg`, `--multirun`, ...) and a config that asks for a multirun still go
through `@hydra.main`.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from typing import Any

from pdsim.errors import one_line


def run_once(task: Callable[[Any], object], overrides: list[str], job_name: str) -> int | None:
    """Compose once, validate, run `task` (a @hydra.main function) as hydra would; its exit
    status, or None when the composed config asks for a multirun (a sweep preset, hydra.mode):
    then the caller hands the command to @hydra.main."""
    from hydra import initialize_config_dir
    from hydra._internal.callbacks import Callbacks
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import run_job
    from hydra.errors import HydraException
    from hydra.types import HydraContext, RunMode
    from omegaconf.errors import OmegaConfBaseException

    from pdsim.config import register_configs, to_config
    from pdsim.paths import SCENARIOS_DIR

    register_configs()
    with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3", job_name=job_name):
        hydra = GlobalHydra.instance().hydra
        assert hydra is not None
        try:
            cfg = hydra.compose_config("config", overrides, with_log_configuration=True, run_mode=RunMode.RUN)
            if cfg.hydra.mode == RunMode.MULTIRUN:
                return None
            to_config(_job_config(cfg))
        except (HydraException, OmegaConfBaseException, ValueError) as exc:
            print(f"pdsim: error: {one_line(exc)}", file=sys.stderr)
            return 2
        cfg.hydra.mode = RunMode.RUN
        callbacks = Callbacks(cfg)
        callbacks.on_run_start(config=cfg, config_name="config")
        ret = run_job(task_function=task, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None,
                      hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=callbacks))
        callbacks.on_run_end(config=cfg, config_name="config", job_return=ret)
        _ = ret.return_value  # re-raises what the task raised
    return 0


def _job_config(cfg: Any) -> Any:
    """The composed config without its `hydra` node, still typed by the schema (what run_job
    hands the task), so `to_config` checks it as it will check the task's (~10 ms, where a
    plain-dict copy merged into the schema took ~45 ms)."""
    from omegaconf import open_dict, read_write

    job = copy.deepcopy(cfg)
    with read_write(job), open_dict(job):
        del job["hydra"]
    return job
