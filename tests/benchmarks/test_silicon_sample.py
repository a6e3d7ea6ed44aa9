"""benchmarks/silicon_sample.py: a stratified, seeded, redrawable sample of silicon rows."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pandas as pd
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import silicon_sample  # noqa: E402

FIELDS = ["id", "model_path", "system", "backend", "mode", "isl"]
MOE, DENSE = "deepseek-ai/DeepSeek-R1", "Qwen/Qwen3-32B"


def write(path: Path, rows: list[dict[str, str]]) -> Path:
    pd.DataFrame(rows, columns=FIELDS).to_csv(path, index=False)
    return path


def read_ids(path: Path) -> list[str]:
    with path.open(newline="") as f:
        return [r["id"] for r in csv.DictReader(f)]


def table(tmp_path: Path) -> Path:
    """Group (MOE, b200, sglang, agg) has 5 rows, (MOE, b200, sglang, disagg) 2, (DENSE, ...) 3."""
    rows = [{"id": f"m{i}", "model_path": MOE, "system": "b200_sxm", "backend": "sglang", "mode": "agg",
             "isl": str(1000 + i)} for i in range(5)]
    rows += [{"id": f"d{i}", "model_path": MOE, "system": "b200_sxm", "backend": "sglang", "mode": "disagg",
              "isl": "8192"} for i in range(2)]
    rows += [{"id": f"q{i}", "model_path": DENSE, "system": "h100_sxm", "backend": "vllm", "mode": "agg",
              "isl": "1024"} for i in range(3)]
    return write(tmp_path / "rows.csv", rows)


def test_caps_every_group_keeps_order_and_redraws_the_same(tmp_path: Path) -> None:
    rows = table(tmp_path)
    for name in ("one.csv", "two.csv"):
        assert silicon_sample.main(["--rows", str(rows), "--out", str(tmp_path / name), "--per-group", "2",
                                    "--seed", "3"]) == 0
    ids = read_ids(tmp_path / "one.csv")
    assert ids == read_ids(tmp_path / "two.csv")
    assert len(ids) == 6  # 2 of the 5 m rows, both d rows, 2 of the 3 q rows
    assert sum(i.startswith("m") for i in ids) == 2 and sum(i.startswith("q") for i in ids) == 2
    assert {"d0", "d1"} <= set(ids)
    assert ids == sorted(ids, key=read_ids(rows).index)
    with (tmp_path / "one.csv").open(newline="") as f:
        assert next(csv.reader(f)) == FIELDS


def test_other_seeds_draw_other_rows_and_exclude_makes_samples_disjoint(tmp_path: Path) -> None:
    rows = table(tmp_path)
    drawn = set()
    for seed in range(6):
        silicon_sample.main(["--rows", str(rows), "--out", str(tmp_path / "s.csv"), "--per-group", "1",
                             "--seed", str(seed)])
        drawn.add(tuple(read_ids(tmp_path / "s.csv")))
    assert len(drawn) > 1
    silicon_sample.main(["--rows", str(rows), "--out", str(tmp_path / "a.csv"), "--per-group", "2"])
    silicon_sample.main(["--rows", str(rows), "--out", str(tmp_path / "b.csv"), "--per-group", "2",
                         "--exclude", str(tmp_path / "a.csv")])
    a, b = read_ids(tmp_path / "a.csv"), read_ids(tmp_path / "b.csv")
    assert not set(a) & set(b)
    assert len(a) == 6 and len(b) == 3  # b: 2 of the 3 m rows a left, no d row, the one q row a left
    assert sum(i.startswith("m") for i in b) == 2 and sum(i.startswith("q") for i in b) == 1


def test_kind_keeps_moe_or_dense_models(tmp_path: Path) -> None:
    rows = table(tmp_path)
    silicon_sample.main(["--rows", str(rows), "--out", str(tmp_path / "moe.csv"), "--kind", "moe"])
    silicon_sample.main(["--rows", str(rows), "--out", str(tmp_path / "dense.csv"), "--kind", "dense"])
    assert {i[0] for i in read_ids(tmp_path / "moe.csv")} == {"m", "d"}
    assert read_ids(tmp_path / "dense.csv") == ["q0", "q1", "q2"]


def test_bad_input_names_the_file_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("id,model_path\nx,y\n")
    with pytest.raises(SystemExit) as exit_info:
        silicon_sample.main(["--rows", str(bad), "--out", str(tmp_path / "o.csv")])
    assert exit_info.value.code == 2
    assert f"{bad}: not a silicon-shaped CSV (missing system, backend, mode)" in capsys.readouterr().err
    assert not (tmp_path / "o.csv").exists()
    with pytest.raises(SystemExit):
        silicon_sample.main(["--rows", str(table(tmp_path)), "--out", str(tmp_path / "o.csv"), "--per-group", "0"])
