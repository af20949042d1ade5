"""Which plans interleaved 1F1B runs on: the rule, written once (torch-free).

Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2.2; Megatron-LM's
``forward_backward_pipelining_with_interleaving``) with p pipeline stages and v model chunks
per stage (``ExecutionOptions.virtual_stages``) runs a plan only when

- p >= 2: one stage has nothing to interleave with (``depth_problem``);
- every pipeline's microbatch count is a multiple of p: Megatron's schedule deals microbatches
  to the chunks in groups of p and asserts it (``microbatch_problem``; the planner keeps its
  counts multiples of ``microbatch_step``);
- every chunk holds at least one layer: stage i keeps its layer ids (what the simulator
  prices), cut into v chunks by ``chunk_sizes`` (``stage_problem``; ``chunk_layers`` deals
  them to ranks as the engine runs them).

Who asks: ``Job`` (``model_problem``: more virtual stages than any plan of the model can cut,
refused before a search builds tables per chunk), the simulator (``check_replica`` refuses
p < 2, ``Simulator.check`` raises ``PlanError`` on field ``options.virtual_stages`` for the
rest), the planner (the search masks
stage ranges with ``stage_problem`` and balances microbatches in steps of
``microbatch_step``), and the engine (``sailor_runtime.engine.parallel.schedule.interleave_problem``
and ``chunk_layers`` are these).
"""

from __future__ import annotations

from ..errors import PlanError

FIELD = "options.virtual_stages"


def depth_problem(chunks: int, num_stages: int) -> str | None:
    """Why ``num_stages`` stages cannot run ``chunks`` virtual stages, or None."""
    if chunks > 1 and num_stages < 2:
        return (
            f"interleaved 1F1B (virtual_stages={chunks}) needs pipeline parallelism (>= 2 "
            f"pipeline stages), this plan has {num_stages}; use virtual_stages=1 or a pipelined "
            "plan"
        )
    return None


def microbatch_step(chunks: int, num_stages: int) -> int:
    """What every pipeline's microbatch count must be a multiple of: p under interleaving."""
    return num_stages if chunks > 1 else 1


def microbatch_problem(chunks: int, num_stages: int, num_microbatches: int, pipeline: int):
    """Why pipeline ``pipeline`` cannot run ``num_microbatches`` interleaved, or None."""
    if num_microbatches % microbatch_step(chunks, num_stages):
        return (
            f"pipeline {pipeline} runs {num_microbatches} microbatches, not a multiple of its "
            f"{num_stages} stages (Megatron's interleaved schedule, virtual_stages={chunks}, "
            f"needs one); use a microbatch count that is a multiple of {num_stages} or "
            "virtual_stages=1"
        )
    return None


def chunk_sizes(first: int, last: int, head_layer_id: int, chunks: int) -> list[int]:
    """Layer ids of each of the ``chunks`` chunks of a stage holding ``first..last``: its
    transformer blocks split as evenly as they go (the first chunks take the remainder), the
    embedding (layer id 0) in its first chunk, the head in its last. A 0 is a chunk with no
    layer (``stage_problem``)."""
    emb, head = first == 0, last == head_layer_id
    blocks = last - first + 1 - emb - head
    sizes = [blocks // chunks + (k < blocks % chunks) for k in range(chunks)]
    sizes[0] += emb
    sizes[-1] += head
    return sizes


def most_chunks(num_layers: int) -> int:
    """The most virtual stages any plan of a model with ``num_layers`` transformer blocks can
    run. The fewest blocks v chunks per stage need is on a two-stage plan: v on the first stage
    (``chunk_sizes`` gives the remainder to the first chunks, so the embedding cannot fill the
    last one) and v - 1 on the last (the head fills its last chunk): 2 v - 1 <= num_layers."""
    return max(1, (num_layers + 1) // 2)


def model_problem(chunks: int, num_layers: int, model_name: str) -> str | None:
    """Why no plan of a model with ``num_layers`` blocks runs ``chunks`` virtual stages, or
    None (checked on the job, before any search builds per-chunk tables)."""
    most = most_chunks(num_layers)
    if chunks <= most:
        return None
    return (
        f"{chunks} virtual stages need a layer in every chunk of >= 2 pipeline stages, and "
        f"{model_name} has {num_layers} transformer blocks: at most {most}; use "
        f"virtual_stages <= {most}"
    )


def stage_problem(stage: int, first: int, last: int, head_layer_id: int, chunks: int):
    """Why stage ``stage`` (layer ids ``first..last``) cannot be cut into ``chunks`` chunks of
    at least one layer each, or None."""
    if chunks == 1 or min(chunk_sizes(first, last, head_layer_id, chunks)) > 0:
        return None
    blocks = last - first + 1 - (first == 0) - (last == head_layer_id)
    return (
        f"stage {stage} holds {last - first + 1} layer ids ({blocks} blocks), too few for "
        f"{chunks} chunks of at least one layer each (virtual_stages={chunks}); use fewer "
        "virtual stages or a plan with more layers per stage"
    )


def chunk_layers(stages: list[tuple[int, int]], head_layer_id: int, chunks: int):
    """Layer-id ranges ``[stage][chunk] -> (first, last)`` of an interleaved plan.

    Stage i of the plan keeps its number of layers, cut into v chunks (``chunk_sizes``).
    Layer ids are then dealt in Megatron's order, chunk 0 of every stage, then chunk 1, ...;
    so chunk k of stage i holds the (k p + i)-th run of consecutive layer ids. Raises
    ``PlanError`` (a ValueError) naming the stage when a chunk would hold no layer."""
    sizes = []
    for i, (first, last) in enumerate(stages):
        problem = stage_problem(i, first, last, head_layer_id, chunks)
        if problem is not None:
            raise PlanError(problem, field=FIELD)
        sizes.append(chunk_sizes(first, last, head_layer_id, chunks))
    out = [[(0, 0)] * chunks for _ in stages]
    cursor = 0
    for k in range(chunks):
        for i in range(len(stages)):
            out[i][k] = (cursor, cursor + sizes[i][k] - 1)
            cursor += sizes[i][k]
    return out


def interleave_problem(plan, head_layer_id: int, chunks: int) -> str | None:
    """Why ``plan`` cannot run interleaved with ``chunks`` virtual stages (one line naming
    virtual_stages and the fix), or None. The one statement of the rule (module docstring)."""
    if chunks == 1:
        return None
    p = plan.num_stages
    problem = depth_problem(chunks, p)
    if problem is not None:
        return problem
    for j, rep in enumerate(plan.stages[0].replicas):  # a pipeline keeps its count (Plan)
        problem = microbatch_problem(chunks, p, rep.num_microbatches, j)
        if problem is not None:
            return problem
    for i, stage in enumerate(plan.stages):
        problem = stage_problem(i, stage.first_layer, stage.last_layer, head_layer_id, chunks)
        if problem is not None:
            return problem
    return None


def check_interleave(plan, head_layer_id: int, chunks: int) -> None:
    """Raise ``PlanError`` on field ``options.virtual_stages`` unless ``plan`` runs
    interleaved with ``chunks`` virtual stages (``interleave_problem``)."""
    problem = interleave_problem(plan, head_layer_id, chunks)
    if problem is not None:
        raise PlanError(problem, field=FIELD)
