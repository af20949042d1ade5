"""Peak memory of one GPU of a replica: named terms and the constants behind them.

Terms (bytes, per GPU of a TP group):

- ``weights``: parameters of the stage's layers at the training dtype.
- ``gradients``: fp32 (Megatron accumulates and all-reduces gradients in an fp32 ``main_grad``
  buffer also in mixed precision, ``accumulate_allreduce_grads_in_fp32``).
- ``optimizer_states``: Adam keeps m and v in fp32 (8 B/param); SGD a momentum buffer (4 B);
  mixed precision adds the fp32 master weights (4 B) (Rajbhandari et al., ZeRO, 2020, Sec. 3.1).
- ``activations``: bytes stashed per microbatch for the stage's layers (profile, else
  ``ModelSpec.stash_terms``) x microbatches in flight under 1F1B at stage i of P:
  min(P - i, M) (Narayanan et al. 2021, Sec. 2.2; never more than the M that exist).
- ``transient``: the largest short-lived working set on top, while the last microbatch runs
  backward: the head's logits in the training dtype with a fused cross-entropy (its fp32
  softmax is stashed and becomes the gradient in place), two fp32 copies more with an eager
  one (``ExecutionOptions.fused_loss``), else one layer's output and its gradient
  (``transient_bytes``).
- ``gathered_weights`` (ZeRO-2/3, hybrid): parameters all-gathered from their shards, as FSDP2
  runs them (the engine's ``fsdp``; ``gathered_weight_bytes``).
- ``comm_buffers``: p2p receive buffers (activation in, gradient in) for pipelined stages.
- ``framework``: CUDA context, NCCL communicator buffers and the caching allocator's reserve,
  by GPU platform (``FRAMEWORK_OVERHEAD``), since nvidia-smi counts them in the peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..catalog.gpus import GPUType
from ..dtypes import dtype_bytes

GiB = 1024**3
MiB = 1024**2


@dataclass(frozen=True)
class FrameworkOverhead:
    cuda_context: int
    """Driver context + cuBLAS/cuDNN workspaces + PyTorch's CUDA kernels (per process)."""
    nccl_per_communicator: int
    """NCCL buffers per communicator (NCCL_BUFFSIZE 4 MiB x channels x peers)."""
    allocator_reserve_fraction: float
    """Caching-allocator blocks reserved but not in use, as a fraction of the tensors' peak."""
    source: str


FRAMEWORK_OVERHEAD: dict[str, FrameworkOverhead] = {
    # Grace-Hopper: 64 KiB pages and the larger Hopper kernel images make the context big. The
    # 15 GH200 runs pin the constant (3.45 GiB: the minimax fit, 3.46 on a 5 MiB grid, worst
    # |error| 8.4%, mean 4.6%) and show no extra allocator reserve growing with the tensors.
    # Fitted on the runs that bench/sim_validation.py scores, so that bench also refits it
    # leave-one-out. Refitted 2026-11-27 when the head's transient lost a double-counted fp32
    # softmax (``transient_bytes``): 3.3 GiB before.
    "superchip": FrameworkOverhead(
        int(3.45 * GiB),
        256 * MiB,
        0.0,
        "minimax fit to the 15 GH200 validation runs of the original Sailor (nvidia-smi "
        "max_mem); leave-one-out in bench/sim_validation.py",
    ),
    "sxm": FrameworkOverhead(
        int(1.2 * GiB),
        256 * MiB,
        0.03,
        "PyTorch CUDA context + cuBLAS workspace on A100/H100 (~0.8-1.5 GiB, nvidia-smi)",
    ),
    "pcie": FrameworkOverhead(
        int(1.0 * GiB),
        128 * MiB,
        0.03,
        "PyTorch CUDA context on consumer/PCIe GPUs (~0.7-1.2 GiB, nvidia-smi)",
    ),
    "cpu": FrameworkOverhead(200 * MiB, 0, 0.0, "Python + torch runtime on CPU"),
}

GRAD_BYTES = {"fp32": 4, "bf16": 4, "fp16": 4}
MASTER_WEIGHT_BYTES = {"fp32": 0, "bf16": 4, "fp16": 4}
OPTIMIZER_STATE_BYTES = {"adam": 8, "adamw": 8, "sgd": 4}


def framework_overhead(gpu: GPUType) -> FrameworkOverhead:
    return FRAMEWORK_OVERHEAD.get(gpu.platform, FRAMEWORK_OVERHEAD["sxm"])


def transient_bytes(
    model, last_layer: int, mbs: int, seq: int, dtype: str, tp: int, fused_loss: bool = True
) -> int:
    """The largest short-lived working set of a stage ending at ``last_layer``, beyond its
    stash. With the head, per logit (``mbs * seq * vocab / tp``): a fused cross-entropy
    (``fused_loss``: Megatron's vocab-parallel one, the engine's ``sailor_profiler.zoo.tp``)
    builds the fp32 softmax in one buffer, which the stash counts (``ModelSpec.stash_terms``'
    ``logits``), and turns it into the gradient in place; beside it live the logits in the
    training dtype (the matmul's output in forward, the gradient cast back in backward). An
    eager ``F.cross_entropy`` on the upcast logits (torchtitan, Hugging Face) also holds the
    log-softmax's output gradient and its input gradient in backward: 8 bytes. Three fp32
    copies on top of the stash before 2026-11-27 double-counted the softmax: OPT-350M on one
    H200 at 8 x 2048 tokens peaked 17 % below that prediction (``bench/gpu_smoke.py``).
    Otherwise one layer's output and its gradient."""
    if last_layer == model.head_layer_id:
        per_logit = dtype_bytes(dtype) if fused_loss else 2 * 4
        return mbs * seq * model.vocab_size // tp * per_logit
    return 2 * model.activation_out_bytes(0, mbs, seq, dtype)


def weight_cast_bytes(model, layer_id: int, tp: int, dtype: str) -> int:
    """Bytes of a layer's 16-bit weight copies that ``torch.autocast`` makes in forward over
    fp32 weights and the matmuls save for backward: every weight but the norms' (which run in
    fp32) and the embedding's (a lookup, not cast); 0 in fp32. A stash measured by
    sailor-profiler holds them (it runs the engine's layers: fp32 weights under autocast);
    the simulator counts them once, as the 16-bit ``weights`` term of mixed precision, so
    they come out of the measured stash (``MemoryComponents.layer_table``). Seen on CPU: the
    OPT-350M head's stash was 209 MB at 2 x 256 tokens, its fp32 softmax 103 MB and its bf16
    LM-head copy 103 MB; with both counted the peak came out 8.7 % over the measured one."""
    if dtype == "fp32" or model.layer_kind(layer_id) == "embedding":
        return 0
    terms = model.param_terms(layer_id, tp)
    return sum(v for k, v in terms.items() if "norm" not in k) * dtype_bytes(dtype)


def in_flight(stage_index: int, num_stages: int, num_microbatches: int) -> int:
    """Microbatches whose activations stage i holds at once under 1F1B: min(P - i, M)."""
    return min(num_stages - stage_index, num_microbatches)


def position_terms(
    act_out: int, tp: int, dp: int, stage_index: int, num_stages: int
) -> tuple[int, int]:
    """(p2p receive buffer bytes, NCCL communicators) of one GPU at stage i of P: an
    activation-sized buffer (``act_out``) per pipeline neighbour; a communicator for the TP
    group (tp > 1), the DP ring (dp > 1) and each pipeline neighbour."""
    neighbours = (stage_index > 0) + (stage_index < num_stages - 1)
    return act_out * neighbours, (tp > 1) + (dp > 1) + neighbours


def model_state_terms(
    params: int, dtype: str, optimizer: str, grad_bytes: int | None = None, shards=(1, 1, 1),
    experts: tuple[int, tuple[int, int, int]] | None = None,
) -> dict[str, int]:  # fmt: skip
    """weights, gradients and optimizer states (with fp32 master weights in mixed precision)
    of ``params`` parameters (an int, or a numpy array of them); ``shards`` = (weights,
    gradients, optimizer) divisors under ZeRO (``sharding``); ``grad_bytes`` per gradient
    (default ``GRAD_BYTES``). ``experts`` = (routed-expert parameters among ``params``, their
    own divisors): under expert parallelism ZeRO shards them over fewer ranks."""
    if experts is not None and experts[0]:
        held, expert_shards = experts
        dense = model_state_terms(params - held, dtype, optimizer, grad_bytes, shards)
        routed = model_state_terms(held, dtype, optimizer, grad_bytes, expert_shards)
        return {k: dense[k] + routed[k] for k in dense}
    g = GRAD_BYTES[dtype] if grad_bytes is None else grad_bytes
    w_shard, g_shard, o_shard = shards
    state = OPTIMIZER_STATE_BYTES[optimizer] + MASTER_WEIGHT_BYTES[dtype]
    return {
        "weights": params * dtype_bytes(dtype) // w_shard,
        "gradients": params * g // g_shard,
        "optimizer_states": params * state // o_shard,
    }


def sharding(zero: str, shard_group: int) -> tuple[int, int, int]:
    """(weights, gradients, optimizer) divisors of ZeRO stage ``zero`` over ``shard_group``
    data-parallel ranks (Rajbhandari et al. 2020, Sec. 5.1: P_os, P_os+g, P_os+g+p). ZeRO-2 as
    FSDP2 runs it (``reshard_after_forward=False``, FSDP1's SHARD_GRAD_OP; the engine's zero2)
    keeps the parameters sharded between steps too: what it gathers for the step is
    ``gathered_weight_bytes``."""
    n = max(shard_group, 1)
    return {
        "none": (1, 1, 1),
        "zero1": (1, 1, n),
        "zero2": (n, n, n),
        "zero3": (n, n, n),
        "hybrid": (n, n, n),
    }[zero]


def gathered_weight_bytes(zero: str, dtype: str, range_params, largest_layer_params):
    """Bytes of parameters all-gathered from their shards that one GPU holds at the peak (the
    last microbatch's backward starting), as FSDP2 runs each stage (the engine's ``fsdp``):

    - zero2 (``reshard_after_forward=False``): every layer of the range (``range_params``),
      gathered in its forward and kept until its backward, next to the shards (measured on
      gloo ranks: the step peak rises by exactly the unsharded weights; also with a shard
      group of one, FSDP2 gathers into a buffer of its own);
    - zero3 / hybrid: the layer in use and the one prefetched, at most twice the largest
      (``largest_layer_params``).

    ints, or numpy arrays of them (the planner's [a, b] tables)."""
    if zero == "zero2":
        return range_params * dtype_bytes(dtype)
    if zero in ("zero3", "hybrid"):
        return 2 * largest_layer_params * dtype_bytes(dtype)
    return 0


def memory_terms(
    *,
    gpu: GPUType,
    dtype: str,
    optimizer: str,
    params: int,
    activation_per_microbatch: int,
    in_flight_microbatches: int,
    transient: int,
    p2p_buffer: int,
    communicators: int,
    grad_bytes: int | None = None,
    shards: tuple[int, int, int] = (1, 1, 1),
    extra: dict[str, int] | None = None,
    experts: tuple[int, tuple[int, int, int]] | None = None,
) -> dict[str, int]:
    """Named bytes of one GPU; their sum is the peak. ``extra``: further persistent tensors by
    name (e.g. ``fp8_weight_copies``), counted like the model states; ``experts`` as in
    ``model_state_terms``."""
    over = framework_overhead(gpu)
    terms = {
        **model_state_terms(params, dtype, optimizer, grad_bytes, shards, experts),
        **(extra or {}),
        **_running_terms(over, activation_per_microbatch, in_flight_microbatches, transient,
                         p2p_buffer, communicators),
    }  # fmt: skip
    terms["framework"] = framework_bytes(over, sum(terms.values()))
    return terms


def _running_terms(over, activation_per_microbatch, in_flight, transient, p2p_buffer, comms):
    """The terms besides the model states: activations stashed for the microbatches in flight,
    the transient peak, communication buffers (ints, or numpy arrays of them)."""
    return {
        "activations": activation_per_microbatch * in_flight,
        "transient": transient,
        "comm_buffers": p2p_buffer + comms * over.nccl_per_communicator,
    }


def framework_bytes(over: FrameworkOverhead, tensors):
    """The CUDA context and the caching allocator's reserve on top of ``tensors`` bytes."""
    return over.cuda_context + _floor(over.allocator_reserve_fraction * tensors)


def static_bytes(
    params, dtype: str, optimizer: str, grad_bytes=None, shards=(1, 1, 1), experts=None
):
    """weights + gradients + optimizer_states of ``memory_terms`` for ``params`` parameters
    (an int, or a numpy array of them: the planner's [a, b] tables)."""
    terms = model_state_terms(params, dtype, optimizer, grad_bytes, shards, experts)
    return sum(terms.values())


def peak_bytes(
    over: FrameworkOverhead,
    static: int,
    activation_per_microbatch: int,
    in_flight_microbatches: int,
    transient: int,
    p2p_buffer: int,
    communicators: int,
) -> int:
    """``sum(memory_terms(...).values())`` from ``static`` (``static_bytes``) and the same
    running terms and framework formula (a test checks both agree). Also takes numpy arrays of
    ``static`` / ``activation_per_microbatch`` / ``transient`` (the planner's [a, b] tables)."""
    running = _running_terms(over, activation_per_microbatch, in_flight_microbatches, transient,
                             p2p_buffer, communicators)  # fmt: skip
    tensors = static + sum(running.values())
    return tensors + framework_bytes(over, tensors)


def _floor(x):
    """``int()`` of a non-negative number, elementwise floor of an array (same values)."""
    if isinstance(x, int | float):
        return int(x)
    from numpy import floor  # only the planner's tables get here; numpy is a dependency

    return floor(x)
