"""benchmarks/tokenize_cost.py: the prompts it times are the silicon clients' prompts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import tokenize_cost  # noqa: E402


def _words(n: int) -> Tokenizer:
    """A word-level tokenizer of the words w0 .. w{n-1}: a prompt's tokens read back from its text."""
    tok = Tokenizer(WordLevel({f"w{i}": i for i in range(n)}, unk_token="w0"))
    tok.pre_tokenizer = Whitespace()
    return tok


def test_inferencex_prompts_are_runs_of_consecutive_ids_wrapping_at_the_vocabulary() -> None:
    # bench_serving's random dataset: ids (offset + j) mod vocab, decoded; offset 8 of 10 words
    text = tokenize_cost.inferencex_prompt(_words(10), 5, offset=8)
    assert text.split() == ["w8", "w9", "w0", "w1", "w2"]


def test_natural_prompts_are_a_window_of_the_corpus() -> None:
    corpus = [3, 4, 5, 6, 7, 8]
    assert tokenize_cost.natural_prompt(_words(10), corpus, 3, offset=1).split() == ["w4", "w5", "w6"]
    assert tokenize_cost.natural_prompt(_words(10), corpus, 3, offset=4).split() == ["w4", "w5", "w6"]  # 4 mod 3


def test_measure_gives_one_positive_median_per_recipe_and_length() -> None:
    rows = tokenize_cost.measure(_words(1000), repeats=2)
    assert [(r["recipe"], r["prompt_tokens"]) for r in rows] == [
        ("inferencex", 1024), ("inferencex", 8192), ("aiperf", 1024), ("aiperf", 8192)]
    assert all(0 < r["min_us_per_token"] <= r["us_per_token"] for r in rows)


def test_bad_repeats_are_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        tokenize_cost.main(["--repeats", "0"])
    assert "--repeats must be >= 1, got 0" in capsys.readouterr().err
