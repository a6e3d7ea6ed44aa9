"""The GPU check's environment: carried wheels installed into a temporary site dir, missing system
libraries on LD_LIBRARY_PATH, and a record of what ran (versions, device, install time).

Nothing here reaches a network: pip runs with --no-index over the carried files only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, TextIO

REPO = Path(__file__).resolve().parents[2]
SYSLIBS = "syslibs.tar.xz"
FLASHINFER_CACHE = "/tmp/pdreal-gpu-check-flashinfer"  # fixed: a rerun on a warm machine skips the JIT
PACKAGES = ("torch", "numpy", "pandas", "simpy", "hydra-core", "omegaconf", "pyzmq", "librt",
            "mooncake-transfer-engine-cuda13", "flashinfer-python", "apache-tvm-ffi")


def prepare_environment(wheels: Path | None, work: Path, log: TextIO) -> dict[str, str]:
    """The environment the checks run in. With wheels: installs them into work/site (no network,
    no dependencies resolved: the set is complete by construction) and puts it first on PYTHONPATH."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PDSIM_PURE_PYTHON": "1", "MC_LOG_LEVEL": "ERROR",
           "FLASHINFER_WORKSPACE_BASE": FLASHINFER_CACHE, "FLASHINFER_CUDA_ARCH_LIST": "9.0",
           "MAX_JOBS": str(os.cpu_count() or 4)}
    nvcc = shutil.which("nvcc")
    if nvcc and "CUDA_HOME" not in env:  # flashinfer's JIT links -lcudart from $CUDA_HOME/lib64
        env["CUDA_HOME"] = str(Path(nvcc).resolve().parents[1])
    paths = [str(REPO)]
    files = sorted(wheels.rglob("*.whl")) if wheels is not None and wheels.is_dir() else []
    if files:
        site = work / "site"
        start = time.perf_counter()
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
               "--no-cache-dir", "--disable-pip-version-check", "--target", str(site), *map(str, files)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        log.write(f"pip install of {len(files)} wheels into {site}: exit {done.returncode} in "
                  f"{time.perf_counter() - start:.1f} s\n{done.stdout}{done.stderr}")
        if done.returncode != 0:
            raise SystemExit(f"GPU check: installing the carried wheels failed (exit {done.returncode}); see check.log")
        paths.insert(0, str(site))
        fallback = missing_system_libs(wheels / SYSLIBS, work / "syslibs", log)
        if fallback:
            env["LD_LIBRARY_PATH"] = os.pathsep.join([str(fallback), env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
    else:
        log.write(f"no wheels in {wheels}: this Python's own packages are used\n")
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def missing_system_libs(tarball: Path, dest: Path, log: TextIO) -> Path | None:
    """Unpack the carried system libraries and keep only those this machine's loader cannot find
    (ldconfig -p), so that its own libraries win wherever it has them."""
    if not tarball.is_file():
        return None
    known = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    have = {line.split()[0] for line in known.splitlines()[1:] if line.strip()}
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and m.name not in have]
        tar.extractall(dest, members=members, filter="data")
    log.write(f"system libraries missing here, taken from {tarball.name}: "
              f"{', '.join(sorted(m.name for m in members)) or 'none'}\n")
    return dest if members else None


PROBE = """
import importlib.metadata as md, json, platform, sys
facts = {"python": sys.version.split()[0], "platform": platform.platform()}
for name in sys.argv[1].split(","):
    try:
        facts[name] = md.version(name)
    except md.PackageNotFoundError:
        facts[name] = None
try:
    import torch
    facts["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
        facts["cuda"] = torch.version.cuda
except Exception as exc:
    facts["torch_error"] = repr(exc)
try:
    import mooncake.engine  # noqa: F401
    facts["mooncake_engine_import"] = "ok"
except Exception as exc:
    facts["mooncake_engine_import"] = repr(exc)[:300]
print(json.dumps(facts))
"""


def describe_environment(env: dict[str, str], device: str, shape: str, log: TextIO) -> dict[str, Any]:
    """Versions, device, and whether mooncake's engine imports, as the checks will see them."""
    done = subprocess.run([sys.executable, "-c", PROBE, ",".join(PACKAGES)], env=env, capture_output=True,
                          text=True, check=False, timeout=120)
    log.write(f"environment probe: exit {done.returncode}\n{done.stdout}{done.stderr}")
    try:
        facts = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        facts = {"probe_error": done.stderr[-500:]}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip()
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "commit": commit or "unknown", "device": device,
            "shape": shape, "pdsim_core": "pure Python (PDSIM_PURE_PYTHON=1)", **facts}
