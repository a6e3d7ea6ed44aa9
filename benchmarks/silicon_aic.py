"""NVIDIA AIConfigurator's predictions for silicon rows: its own venv, a subprocess, a cache.

AIConfigurator (`aiconfigurator==0.12.0`, PyPI, Apache-2.0) is the anchor the silicon benchmark
is compared with. It pins its own dependencies, so it lives in a venv the benchmark makes for
itself (benchmarks/.silicon-venv, git-ignored) and runs in a subprocess
(silicon_aic_worker.py). Predictions are cached in benchmarks/.silicon-cache/ by row id and a
fingerprint of the row's fields, so a rerun only predicts rows it has not seen (a call costs
~2 s: a whole dev split is about two core-hours the first time, none afterwards).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

HERE = Path(__file__).resolve().parent
AIC_VERSION = "0.12.0"
VENV_DIR = HERE / ".silicon-venv"
CACHE_DIR = HERE / ".silicon-cache"
WORKER = HERE / "silicon_aic_worker.py"
INPUT_FIELDS = ("model_path", "system", "mode", "backend", "backend_version", "isl", "osl", "gemm_quant_mode",
                "moe_quant_mode", "batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
                "moe_ep_size")
CACHE_COLUMNS = ("id", "fingerprint", "aic_ttft_ms", "aic_tpot_ms", "aic_version", "aic_error")


@dataclass(frozen=True)
class AicPrediction:
    ttft_ms: float  # NaN when AIConfigurator refused the row
    tpot_ms: float
    version: str  # the backend version whose tables it used
    error: str

    @property
    def ok(self) -> bool:
        return not self.error and self.ttft_ms == self.ttft_ms and self.tpot_ms == self.tpot_ms


def fingerprint(row: dict[str, str]) -> str:
    """A short hash of the fields AIConfigurator reads (disaggregated ones included)."""
    keys = [k for k in sorted(row) if k in INPUT_FIELDS or k.startswith(("prefill_", "decode_"))]
    return f"{zlib.crc32(json.dumps([row.get(k, '') for k in keys]).encode()):08x}"


def ensure_venv(venv: Path = VENV_DIR) -> Path:
    """The venv's python, creating the venv and installing AIConfigurator on first use."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import aiconfigurator.cli.api"]
    if python.is_file() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    print(f"silicon: installing aiconfigurator=={AIC_VERSION} into {venv} (once, ~1 min)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"aiconfigurator=={AIC_VERSION}"], check=True)
    return python


def cache_path(cache_dir: Path = CACHE_DIR) -> Path:
    return cache_dir / f"aic_{AIC_VERSION}.csv"


def read_cache(path: Path) -> dict[tuple[str, str], AicPrediction]:
    if not path.is_file():
        return {}
    with path.open(newline="") as f:
        return {(r["id"], r["fingerprint"]): AicPrediction(_float(r["aic_ttft_ms"]), _float(r["aic_tpot_ms"]),
                                                           r["aic_version"], r["aic_error"])
                for r in csv.DictReader(f)}


def _float(text: str) -> float:
    return float(text) if text else float("nan")


def predict_rows(rows: list[dict[str, str]], workers: int = 1, cache_dir: Path = CACHE_DIR,
                 venv: Path = VENV_DIR) -> dict[str, AicPrediction]:
    """AIConfigurator's prediction per row id (cached ones read, the others computed and appended)."""
    path = cache_path(cache_dir)
    cached = read_cache(path)
    todo = [r for r in rows if (r["id"], fingerprint(r)) not in cached]
    if todo:
        python = ensure_venv(venv)
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.is_file()
        with path.open("a", newline="") as f, tqdm(total=len(todo), desc="aiconfigurator", unit="row") as bar:
            writer = csv.writer(f)
            if new:
                writer.writerow(CACHE_COLUMNS)
            lock = threading.Lock()
            chunks = [todo[i::max(1, workers)] for i in range(max(1, workers))]
            threads = [threading.Thread(target=_run_chunk, args=(python, chunk, writer, f, lock, bar, cached))
                       for chunk in chunks if chunk]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    return {r["id"]: cached.get((r["id"], fingerprint(r)), AicPrediction(float("nan"), float("nan"), "",
                                                                         "not predicted")) for r in rows}


def _run_chunk(python: Path, rows: list[dict[str, str]], writer, f, lock: threading.Lock, bar: tqdm,
               cached: dict[tuple[str, str], AicPrediction]) -> None:
    """One worker subprocess over `rows`; each answer is cached as soon as it arrives."""
    prints = {r["id"]: fingerprint(r) for r in rows}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as tmp:
        json.dump(rows, tmp)
    proc = subprocess.Popen([str(python), str(WORKER), tmp.name], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    for line in _lines(proc.stdout):
        answer = json.loads(line)
        pred = AicPrediction(_none_nan(answer["ttft_ms"]), _none_nan(answer["tpot_ms"]),
                             answer["version"], answer["error"])
        with lock:
            cached[(answer["id"], prints[answer["id"]])] = pred
            writer.writerow([answer["id"], prints[answer["id"]], _text(pred.ttft_ms), _text(pred.tpot_ms),
                             pred.version, pred.error])
            f.flush()
            bar.update()
    proc.wait()
    Path(tmp.name).unlink(missing_ok=True)


def _lines(stream: Iterable[str]) -> Iterable[str]:
    return (line for line in stream if line.startswith("{"))


def _none_nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def _text(value: float) -> str:
    return "" if value != value else f"{value:.6f}"
