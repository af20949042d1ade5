"""Mixture-of-experts (MoE) layers: their shape (``MoESpec``) and expert parallelism (EP).

A MoE block replaces the dense MLP by ``num_experts`` expert MLPs of width ``expert_ffn`` of
which a router picks ``top_k`` per token, plus ``num_shared_experts`` that every token passes
through (DeepSeekMoE, Dai et al. 2024, arXiv 2401.06066, Sec. 3; Qwen2-MoE). The first
``first_dense_layers`` blocks keep a dense MLP of ``ModelSpec.ffn_hidden_size`` (DeepSeek-V3's
``first_k_dense_replace``).

Expert parallelism (Lepikhin et al. 2020, GShard, arXiv 2006.16668, Sec. 2.2; Megatron-Core
``expert_model_parallel_size``): the experts of a layer are split over ``ep`` data-parallel
ranks, so a GPU holds ``num_experts / ep`` of them; each MoE layer sends every token's hidden
state to the ranks holding its top-k experts (all-to-all *dispatch*) and back (*combine*), in
forward and again in backward. With a ``capacity_factor`` c each expert processes at most
c * tokens * top_k / num_experts tokens (Switch Transformer, Fedus et al. 2021, arXiv
2101.03961, Sec. 2.2), so compute and all-to-all volume are those of the capacity, not of the
mean load; None = dropless (the mean load, as Megatron-Core and DeepSeek-V3 train).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ValidationError


@dataclass(frozen=True)
class MoESpec:
    """Shape of the model's MoE blocks (values, no hardware)."""

    num_experts: int
    """Routed experts per MoE layer."""
    top_k: int
    """Routed experts each token goes to."""
    expert_ffn: int
    """Intermediate width of one routed expert (``moe_intermediate_size``)."""
    num_shared_experts: int = 0
    """Experts every token goes to (DeepSeek ``n_shared_experts``)."""
    shared_expert_ffn: int | None = None
    """Intermediate width of the shared experts together; None = num_shared_experts x
    expert_ffn (Qwen2-MoE gives one shared MLP of ``shared_expert_intermediate_size``)."""
    shared_expert_gate: bool = False
    """A sigmoid gate (h -> 1) scales the shared experts' output (Qwen2-MoE)."""
    router_bias: bool = False
    """A per-expert bias used for top-k selection (DeepSeek-V3 ``e_score_correction_bias``,
    auxiliary-loss-free balancing; a parameter in the checkpoint)."""
    first_dense_layers: int = 0
    """Blocks 1..first_dense_layers have a dense MLP (DeepSeek-V3 ``first_k_dense_replace``)."""
    capacity_factor: float | None = None
    """Tokens per expert at most capacity_factor x the mean load; None = dropless."""

    def __post_init__(self) -> None:
        for field in ("num_experts", "top_k", "expert_ffn"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(
                    f"must be an integer >= 1, got {value!r}", field=f"moe.{field}"
                )
        if self.top_k > self.num_experts:
            raise ValidationError(
                f"top_k {self.top_k} exceeds the {self.num_experts} experts; use top_k <= "
                "num_experts",
                field="moe.top_k",
            )
        if self.num_shared_experts < 0 or self.first_dense_layers < 0:
            raise ValidationError("must be >= 0", field="moe.num_shared_experts")
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ValidationError(
                f"must be > 0 or null (dropless), got {self.capacity_factor!r}",
                field="moe.capacity_factor",
            )

    @property
    def shared_ffn(self) -> int:
        """Intermediate width of all shared experts together (0 without them)."""
        if self.num_shared_experts == 0:
            return 0
        if self.shared_expert_ffn is not None:
            return self.shared_expert_ffn
        return self.num_shared_experts * self.expert_ffn

    @property
    def routed_slots(self) -> float:
        """Expert-MLP passes per token the routed experts compute: top_k dropless, else the
        capacity (c x top_k; tokens over capacity are dropped, slots under it padded)."""
        if self.capacity_factor is None:
            return float(self.top_k)
        return self.capacity_factor * self.top_k

    def is_moe_block(self, block: int) -> bool:
        """Whether block ``block`` (1-based, i.e. the layer id) has a MoE MLP."""
        return block > self.first_dense_layers


def check_expert_parallel(moe: MoESpec | None, ep: int, model_name: str) -> None:
    """Refuse an EP degree the model cannot use, naming the option."""
    if ep == 1:
        return
    if moe is None:
        raise ValidationError(
            f"{model_name} has no experts; expert parallelism needs a mixture-of-experts model "
            "(set expert_parallel=1)",
            field="options.expert_parallel",
        )
    if moe.num_experts % ep:
        raise ValidationError(
            f"expert_parallel {ep} does not divide the {moe.num_experts} experts of "
            f"{model_name}; choose a divisor of {moe.num_experts}",
            field="options.expert_parallel",
        )


def routed_expert_params(model, first: int, last: int, tp: int) -> int:
    """Parameters of the routed experts in layers first..last (per GPU of a TP group), their
    biases included (gpt-oss): a rank holding an expert holds its biases."""
    if model.moe is None:
        return 0
    total = 0
    for layer_id in range(max(first, 1), min(last, model.num_layers) + 1):
        if model.is_moe_block(layer_id):
            terms = model.param_terms(layer_id, tp)
            total += terms["mlp_experts"] + terms.get("mlp_experts_bias", 0)
    return total


def experts_held_elsewhere(model, first: int, last: int, tp: int, ep: int) -> int:
    """Parameters of layers first..last (per GPU of a TP group) that expert parallelism puts
    on the other ``ep - 1`` ranks of the expert group: (1 - 1/ep) of the routed experts."""
    if ep == 1:
        return 0
    total = routed_expert_params(model, first, last, tp)
    return total - total // ep


def held_layer_params(model, layer_id: int, tp: int, ep: int) -> int:
    """Parameters of one layer that one GPU of a TP group holds under expert parallelism
    ``ep``: the layer less the routed experts the other ranks of its expert group hold. What
    ZeRO-3 gathers for the layer: its shard group gathers the experts of this rank's group
    only."""
    return model.params(layer_id, tp) - experts_held_elsewhere(model, layer_id, layer_id, tp, ep)


def experts_held(model, first: int, last: int, tp: int, ep: int) -> int:
    """The routed-expert parameters of layers first..last that one GPU holds: 1/ep of them.
    ZeRO can shard their states only over the ranks holding the same experts (the stage's
    data-parallel ranks / ep; Megatron-Core's expert data-parallel group), not over all."""
    return routed_expert_params(model, first, last, tp) // ep


ALL_TO_ALLS_PER_MICROBATCH = 4
"""Dispatch and combine in forward, and their gradients in backward, per MoE layer."""


def all_to_all_bytes(model, layer_id: int, mbs: int, seq: int, tp: int, e: int) -> float:
    """Bytes one GPU sends in one all-to-all of a MoE layer before its share stays local: each
    of its tokens' hidden state once per routed slot. Under TP the ranks of a group dispatch
    disjoint 1/tp of the tokens (Megatron-Core's token dispatcher with sequence-split input)."""
    if not model.is_moe_block(layer_id):
        return 0.0
    return mbs * seq / tp * model.moe.routed_slots * model.hidden_size * e


def all_to_all_time(nbytes: float, ep: int, local_ranks: int, intra, inter) -> float:
    """Seconds of one all-to-all of ``nbytes`` per GPU over ``ep`` ranks, routing uniform:
    (ep - 1) / ep of it leaves the GPU; the part for the ``local_ranks`` - 1 other ranks of the
    group on this node crosses ``intra`` (NVLink), the rest ``inter`` (the GPU's NIC), both at
    once (Hwang et al. 2023, "Tutel", arXiv 2206.03382, Sec. 3: 2D hierarchical all-to-all
    bound by the slower tier). Not overlapped with compute (Megatron-Core default)."""
    if ep < 2 or nbytes <= 0:
        return 0.0
    local = min(local_ranks, ep)
    within = nbytes * (local - 1) / ep
    across = nbytes * (ep - local) / ep
    t_in = within / intra.bandwidth(nbytes / ep) + (local - 1) * intra.latency_s if within else 0
    t_out = across / inter.bandwidth(nbytes / ep) + inter.latency_s if across else 0.0
    return max(t_in, t_out)


def expert_comm_per_microbatch(
    model, first: int, last: int, mbs: int, seq: int, tp: int, e: int, ep: int, links
) -> float:
    """Seconds of the all-to-alls of layers first..last per microbatch on one GPU; ``links`` =
    (local ranks of the expert group on one node, intra-node curve, inter-node curve)."""
    if ep < 2 or model.moe is None:
        return 0.0
    local, intra, inter = links
    total = 0.0
    for layer_id in range(max(first, 1), min(last, model.num_layers) + 1):
        nbytes = all_to_all_bytes(model, layer_id, mbs, seq, tp, e)
        total += ALL_TO_ALLS_PER_MICROBATCH * all_to_all_time(nbytes, ep, local, intra, inter)
    return total


def check_plan_expert_parallel(ep: int, plan) -> None:
    """Every stage needs a replica count that ``ep`` divides (expert groups of ep consecutive
    replicas), and the replicas of a group one TP degree and one microbatch count: the group
    runs its all-to-alls every layer of every microbatch, rank for rank (a replica with one
    microbatch fewer leaves the others waiting in an all-to-all)."""
    if ep == 1:
        return
    from ..errors import PlanError

    bad = plan.unlike_group(ep, lambda r: (r.tp, r.num_microbatches))
    if bad is None:
        return
    i, start = bad
    if start is None:
        raise PlanError(
            f"expert_parallel {ep} does not divide the {len(plan.stages[i].replicas)} "
            f"replicas of stage {i}; use a data-parallel degree that is a multiple of {ep} or a "
            "smaller expert_parallel",
            field="options.expert_parallel",
        )
    raise PlanError(
        f"replicas {start}..{start + ep - 1} of stage {i} form an expert-parallel group, "
        "which runs its all-to-alls every microbatch, and must have one TP degree and one "
        "microbatch count; use a smaller expert_parallel or a data-parallel degree that "
        "divides the batch",
        field="options.expert_parallel",
    )
