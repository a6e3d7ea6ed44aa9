"""How one instance spreads a model over its GPUs: attention TP x attention DP, MoE TP x EP.

An instance has `tp * dp` GPUs. Attention (and the dense layers) run in `dp` data-parallel
ranks of `tp` GPUs each: a rank holds its own requests, its own KV cache and a copy of the
attention weights split `tp` ways (SGLang's DP attention: `--tp-size tp*dp --dp-size dp
--enable-dp-attention`; TRT-LLM's `enable_attention_dp`). The MoE layers run over all the
instance's GPUs: experts split `moe_ep` ways, each expert's matrices `moe_tp` ways, with
`moe_tp * moe_ep = tp * dp` (AIConfigurator's and the silicon rows' convention). With dp = 1 and
moe_ep = 1 this is plain tensor parallelism, which is what every instance was before.

An instance also names how its MoE layers reach their experts under attention DP (`moe_a2a`:
all-gather / reduce-scatter, or DeepEP's dispatch / combine), since engines set it per instance
(a prefill may all-gather while its decode runs DeepEP). A leaf module (plain values in, no
config types), so that pdsim.config can validate with it.
"""

from __future__ import annotations

from dataclasses import dataclass

MOE_A2A = ("allgather", "deepep")  # how attention-DP ranks reach their experts (perf.moe_a2a)
MOE_A2A_CHOICES = ("", *MOE_A2A)  # a layout's moe_a2a: "" = perf.moe_a2a


@dataclass(frozen=True)
class Parallel:
    """One instance's parallel layout."""

    tp: int = 1  # attention tensor parallelism inside one DP rank
    dp: int = 1  # attention data-parallel ranks
    moe_ep: int = 1  # expert parallelism of the MoE layers (over all tp * dp GPUs)
    # how an attention-DP instance's tokens reach their experts: allgather | deepep; "" = the
    # perf model's default (perf.moe_a2a). Engines set it per instance (SGLang --moe-a2a-backend)
    moe_a2a: str = ""

    @property
    def gpus(self) -> int:
        return self.tp * self.dp

    @property
    def moe_exchange(self) -> bool:
        """Whether the DP ranks exchange tokens with experts spread over them (DP and EP above 1):
        the only layouts a MoE exchange (moe_a2a) applies to."""
        return self.dp > 1 and self.moe_ep > 1

    @property
    def moe_tp(self) -> int:
        """Tensor parallelism inside each expert (the GPUs left after EP)."""
        return self.gpus // self.moe_ep

    @property
    def plain_tp(self) -> bool:
        """Plain tensor parallelism (what every perf model expresses)."""
        return self.dp == 1 and self.moe_ep == 1

    @property
    def text(self) -> str:
        """TP4, TP1xDP8/EP8: the layout as a report shows it."""
        out = f"TP{self.tp}"
        if self.dp > 1:
            out += f"xDP{self.dp}"
        if self.moe_ep > 1:
            out += f"/EP{self.moe_ep}"
        return out

    def validate(self, num_heads: int, num_experts: int, model_name: str, prefix: str) -> None:
        """One-line ValueError naming the field (cluster.<prefix>tp / dp / moe_ep) and its value."""
        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"cluster: field '{prefix}{name}' = {getattr(self, name)} {why}")

        for name in ("tp", "dp", "moe_ep"):
            if getattr(self, name) < 1:
                raise bad(name, "must be >= 1")
        if self.moe_a2a not in MOE_A2A_CHOICES:
            raise ValueError(f"cluster: field '{prefix}moe_a2a' = {self.moe_a2a!r} must be one of {list(MOE_A2A_CHOICES)}")
        if num_heads % self.tp:
            raise bad("tp", f"does not divide model {model_name}'s {num_heads} attention heads")
        if self.moe_ep > 1 and not num_experts:
            raise bad("moe_ep", f"needs an MoE model; {model_name} is dense")
        if self.gpus % self.moe_ep:
            raise bad("moe_ep", f"does not divide the instance's {self.gpus} GPUs (tp {self.tp} x dp {self.dp})")
        if num_experts and num_experts % self.moe_ep:
            raise bad("moe_ep", f"does not divide model {model_name}'s {num_experts} experts")


def split_even(total: int, ranks: int) -> int:
    """The most any of `ranks` ranks holds when `total` items are spread as evenly as they go."""
    return -(-total // ranks)
