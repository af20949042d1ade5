"""The simulator's components, tabulated for the search (one cost model: sailor-sim's).

For one job, ``CostView`` turns ``Simulator.stage_time`` and the memory terms of
``Simulator.replica_memory`` into numpy tables over layer ranges, so the search scores a stage
a..b in O(1) and a whole pipeline position at once:

- ``time_prefix(g, m, t)``: prefix sums of per-microbatch seconds (forward + backward + TP
  communication) from ``stage_time(job, StageSlice(0, l, ...))``; a range's time is a
  difference of two entries, which is what ``stage_time`` itself computes from the profile's
  prefix sums.
- ``peak_matrix(g, m, t, i, p, mm, dp)``: peak bytes of one GPU for every range a..b at stage i of
  p with mm microbatches: ``memory.static_bytes``, ``memory.transient_bytes`` and
  ``memory.peak_bytes`` (the simulator's own functions) applied to whole [a, b] arrays.
- ``fit_matrix(..., sure=True)``: fits with the most microbatches in flight and a DP
  communicator (then it fits in every plan); ``sure=False``: fits with one microbatch in flight
  and no DP (a lower bound: a range outside it fits in no plan). The exact verdict of a whole
  candidate is ``Simulator.replica_peak`` per replica, in ``allocate.Scorer.score``.

Everything is memoized per (GPU type, microbatch size, TP); the tables do not depend on the
inventory, so a re-plan after an availability change reuses all of them.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from sailor_sim import (
    GRAD_BYTES,
    Job,
    StageSlice,
    activation_factor,
    framework_overhead,
    gathered_weight_bytes,
    get_gpu,
    held_layer_params,
    peak_bytes,
    position_terms,
    recompute_transient,
    sharding,
    stage_problem,
    static_bytes,
    transient_bytes,
    uses_flash,
)
from sailor_sim import in_flight as microbatches_in_flight

INF = math.inf
UNBOUNDED_SHARDS = 2**30


class CostView:
    """Tabulated simulator components for one job (thread-safe for reads after building)."""

    def __init__(
        self, sim, job: Job, memory_job: Job | None = None, times_of: CostView | None = None
    ) -> None:
        """``memory_job``: the job whose memory the tables and verdicts use, where it differs
        from the one whose times they hold (the planner's relaxed lean search: the times of
        the job's own recomputation, the memory of full recomputation); default ``job``.
        ``times_of``: a view of the same simulator whose job has the same ``Job.timing_id``
        (its stage times are this job's): its time tables are shared, not rebuilt (the
        option search's ZeRO stages)."""
        self.sim = sim
        self.job = job
        self.memory_job = memory_job or job
        self.interleaved = self.memory_job.options.virtual_stages > 1
        """Whether stage memory depends on the stage's place (i, p), not only on p - i:
        interleaved 1F1B holds Megatron's warm-up chunks, 2 (p - i - 1) + (v - 1) p + 1
        (``activation_factor``), so "surely fits" needs the real stage (``fit_matrix``). Read
        on every stage table position, so set once here."""
        self.model = job.model
        self.n = job.model.num_layer_ids
        self._mem_parts: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._least: dict[tuple, np.ndarray] = {}
        if times_of is not None and (
            times_of.sim is not sim or times_of.job.timing_id != job.timing_id
        ):
            raise ValueError("times_of: another simulator or other stage times")
        self._time: dict[tuple, np.ndarray] = {} if times_of is None else times_of._time
        self._tmat: dict[tuple, np.ndarray] = {} if times_of is None else times_of._tmat
        self._fit: dict[tuple, np.ndarray] = {}
        self.memo: dict[tuple, object] = {}
        """Derived tables of other modules (e.g. per-position stage costs), same lifetime."""
        self._lower = np.tril(np.ones((self.n, self.n), dtype=bool), -1)
        self.upper = ~self._lower
        """[a, b] with a <= b: the layer ranges."""
        self.hits = 0
        self.tp_of = lru_cache(maxsize=None)(self._tp_degrees)

    def chunkable(self) -> np.ndarray | None:
        """[a, b]: whether a stage holding layer ids a..b cuts into the job's virtual stages
        with a layer in every chunk (``sailor_sim.spec.interleave.stage_problem``, the rule
        the simulator and the engine apply); None without interleaving (every range does)."""
        v = self.job.options.virtual_stages
        if v == 1:
            return None
        hit = self.memo.get(("chunkable", v))
        if hit is None:
            head = self.model.head_layer_id
            hit = np.zeros((self.n, self.n), dtype=bool)
            # The rule depends on a range only through (length, holds the embedding, holds
            # the head): ask it once per kind, O(n v), not per range, O(n^2 v).
            verdicts: dict[tuple, bool] = {}
            for a in range(self.n):
                for b in range(a, self.n):
                    kind = (b - a, a == 0, b == head)
                    ok = verdicts.get(kind)
                    if ok is None:
                        ok = verdicts[kind] = stage_problem(0, a, b, head, v) is None
                    hit[a, b] = ok
            self.memo[("chunkable", v)] = hit
        return hit

    # ---- catalog facts ----------------------------------------------------------------------
    def _tp_degrees(self, gpu_type: str) -> tuple[int, ...]:
        """TP degrees within one node of ``gpu_type`` that split the model (powers of two)."""
        return tuple(self.model.tp_degrees(get_gpu(gpu_type).gpus_per_node))

    def capacity(self, gpu_type: str) -> int:
        return get_gpu(gpu_type).memory_bytes

    def supports(self, gpu_type: str) -> bool:
        return get_gpu(gpu_type).supports(self.job.dtype)

    def profiled_oom(self, g: str, m: int, t: int) -> bool:
        """The profile marks (g, m, t) 'oom': the simulator refuses it, so the search skips it
        (cached: every depth asks)."""
        key = ("oom", g, m, t)
        hit = self.memo.get(key)
        if hit is None:
            job = self.job
            entry = self.sim.profiles.oom_entry(
                job.model, g, job.dtype, m, t, job.local_sequence_length
            )
            hit = self.memo[key] = entry is not None
        return hit

    # ---- time -------------------------------------------------------------------------------
    def time_prefix(self, g: str, m: int, t: int) -> np.ndarray:
        key = (g, m, t)
        arr = self._time.get(key)
        if arr is None:
            arr = np.zeros(self.n + 1)
            for last in range(self.n):
                st = self.sim.stage_time(self.job, StageSlice(0, last, g, t, m))
                arr[last + 1] = st.per_microbatch_s
            self._time[key] = arr
        else:
            self.hits += 1
        return arr

    def whole_time(self, g: str, m: int, t: int) -> float:
        """Per-microbatch seconds of every layer id on one stage: ``time_matrix``'s
        [0, n - 1] (the same ``stage_time`` call as the prefix's last entry), without the
        prefix where none was built."""
        pre = self._time.get((g, m, t))
        if pre is not None:
            return float(pre[-1])
        key = ("whole", g, m, t)
        hit = self.memo.get(key)
        if hit is None:
            st = self.sim.stage_time(self.job, StageSlice(0, self.n - 1, g, t, m))
            hit = self.memo[key] = float(st.per_microbatch_s)
        return hit

    def time_matrix(self, g: str, m: int, t: int, extra: float = 0.0) -> np.ndarray:
        """[a, b] = per-microbatch seconds of layer ids a..b, plus ``extra`` (inf where a > b)."""
        key = (g, m, t, extra)
        mat = self._tmat.get(key)
        if mat is None:
            pre = self.time_prefix(g, m, t)
            mat = pre[None, 1:] - pre[:-1, None] + extra
            mat[self._lower] = INF
            self._tmat[key] = mat
        return mat

    def fit_matrix(
        self,
        g: str,
        m: int,
        t: int,
        in_flight: int,
        neighbours: int,
        capacity: int,
        sure: bool = True,
        stage: tuple[int, int, int] | None = None,
    ) -> np.ndarray:
        """[a, b] = True where layer ids a..b fit one GPU with ``neighbours`` pipeline
        neighbours. ``sure``: with ``in_flight`` microbatches stashed and a DP communicator
        (the most a plan can need); else with one microbatch and no DP (the least).
        ``stage`` = (i, p, the most microbatches): the stage's place, which an interleaved
        job's sure verdict needs (``interleaved``); ignored otherwise."""
        if not sure:
            in_flight = 1
        place = stage if sure and self.interleaved else None
        if sure and self.interleaved and stage is None and neighbours > 0:
            raise ValueError("an interleaved job's sure verdict needs the stage (i, p, M)")
        key = (g, m, t, in_flight, neighbours, capacity, sure, place)
        fit = self._fit.get(key)
        if fit is None:
            if place is not None:
                i, p, mm = place
                peak = self.peak_matrix(g, m, t, i, p, mm, sure)
            else:
                # peak_matrix(i, p) depends on (i, p) only through p - i and the neighbours.
                if neighbours == 0:
                    i, p = 0, 1
                elif neighbours == 1:
                    i, p = 0, max(in_flight, 2)  # the first stage of a pipeline of p
                else:
                    i, p = 1, 1 + max(in_flight, 2)  # a middle stage
                peak = self.peak_matrix(g, m, t, i, p, in_flight, sure)
            fit = self._fit[key] = peak <= capacity
        return fit

    # ---- memory -----------------------------------------------------------------------------
    def _parts(self, g: str, m: int, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """[a, b] static bytes (weights, gradients, optimizer states) plus the transient of a
        range ending at b, [a, b] stashed activation bytes per microbatch, [a, b] the bytes
        beyond the model states (transient, cached FP8 weight copies, gathered ZeRO shards)."""
        key = (g, m, t)
        parts = self._mem_parts.get(key)
        if parts is None:
            job, model = self.memory_job, self.model
            seq = job.local_sequence_length
            # the profile's table with the activations the job's options stash
            table = self.sim.layer_table(job, g, m, t)
            params_pre = np.array(table.params, dtype=float)
            act_pre = np.array(table.activation, dtype=float)
            params = params_pre[None, 1:] - params_pre[:-1, None]
            params[0, -1] -= model.shared_head_params(0, self.n - 1, t)  # a tied matrix once
            acts = act_pre[None, 1:] - act_pre[:-1, None]
            transient = np.array(
                [
                    transient_bytes(model, b, m, seq, job.dtype, t, job.options.fused_loss)
                    for b in range(self.n)
                ],
                dtype=float,
            )
            if job.options.recompute == "full":  # one block rebuilt in backward
                flash = uses_flash(job.options, get_gpu(g), job.dtype)
                transient += recompute_transient(model, 0, m, seq, job.dtype, t, flash)
            # static + transient are both position-independent: added once here, and
            # peak_bytes (linear in them) is then given transient 0.
            grad = GRAD_BYTES[job.dtype] if job.options.grad_dtype == "fp32" else 2
            # persistent beyond the model states: cached FP8 weight copies (0 without FP8)
            # and the parameters ZeRO-2/3 gather from their shards (shard-independent)
            fp8_pre = np.array(self.sim.fp8_copy_prefix(job, t), dtype=float)
            extra = fp8_pre[None, 1:] - fp8_pre[:-1, None] + transient[None, :]
            extra = extra + self._gathered(params, t)
            static = static_bytes(params, job.dtype, job.optimizer, grad) + extra
            parts = (static, acts, extra, params, grad)
            self._mem_parts[key] = parts
        return parts

    def _gathered(self, params: np.ndarray, t: int) -> np.ndarray:
        """[a, b] bytes of parameters gathered from their shards (``gathered_weight_bytes``,
        as ``Simulator.replica_memory``): ZeRO-2 the range's held parameters, ZeRO-3 twice
        the largest layer of a..b (a running maximum along each row; under expert parallelism
        the layer less the experts other expert groups hold, ``held_layer_params``)."""
        job = self.memory_job
        largest = 0
        if job.options.shards_parameters:  # a layer gathers its expert group's experts only
            ep = job.options.expert_parallel
            layer = np.array(
                [held_layer_params(self.model, i, t, ep) for i in range(self.n)], dtype=float
            )
            largest = np.maximum.accumulate(np.where(self.upper, layer[None, :], 0.0), axis=1)
        return gathered_weight_bytes(job.options.zero, job.dtype, params, largest)

    def _least_static(self, g: str, m: int, t: int) -> np.ndarray:
        """[a, b] the model states under ZeRO with the least a plan can need: the sharded
        states spread over "all" GPUs (-> 0), whatever the inventory, so the table stays
        valid across re-plans; plus the transient and the FP8 copies (see ``_parts``). One
        per (g, m, t): every position and depth shares it."""
        key = (g, m, t)
        hit = self._least.get(key)
        if hit is None:
            job = self.memory_job
            _static, _acts, transient, params, grad = self._parts(g, m, t)
            shards = sharding(job.options.zero, UNBOUNDED_SHARDS)
            hit = static_bytes(params, job.dtype, job.optimizer, grad, shards) + transient
            self._least[key] = hit
        return hit

    def peak_matrix(self, g: str, m: int, t: int, i: int, p: int, mm: int, dp: bool) -> np.ndarray:
        """[a, b] = peak bytes of one GPU holding layer ids a..b at stage i of p (``mm``
        microbatches, data parallel when ``dp``): ``memory.peak_bytes`` over the arrays, as
        ``Simulator.replica_peak`` computes it for one range."""
        job = self.memory_job
        static, acts, *_ = self._parts(g, m, t)
        if not dp and job.options.zero != "none":
            static = self._least_static(g, m, t)
        if dp:  # the most: interleaving keeps Megatron's warm-up chunks at stage i of p
            acts = acts * activation_factor(job.options, i, p, mm)
        act_out = self.model.activation_out_bytes(0, m, job.local_sequence_length, job.dtype)
        buffer, communicators = position_terms(act_out, t, 2 if dp else 1, i, p)
        peak = peak_bytes(
            framework_overhead(get_gpu(g)),
            static,
            acts,
            microbatches_in_flight(i, p, mm),
            0,  # transient: already in static (see _parts)
            buffer,
            communicators,
        )
        peak[self._lower] = INF
        return peak
