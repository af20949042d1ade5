"""Simulator invariants, on the built-in (analytic) catalog and on imported Sailor data."""

from __future__ import annotations

import dataclasses
import math

import pytest

from sailor_sim import Estimate, Job, Plan, PlanError, Replica, Simulator, Stage, StageSlice
from sailor_sim.dtypes import dtype_bytes
from sailor_sim.simulate.network import Endpoint
from sailor_sim.spec.examples import example_job, example_plan

A, B, WEST, EU = "us-central1-a", "us-central1-b", "us-west1-a", "europe-west4-a"


@pytest.fixture(scope="module")
def sim() -> Simulator:
    return Simulator()


@pytest.fixture(scope="module")
def job() -> Job:
    return Job.create("OPT-350M", global_batch_size=64, sequence_length=2048)


def two_stage(job: Job, zone2: str = A, dp: int = 2, mbs: int = 2, gpu="A100-40") -> Plan:
    micro = job.global_batch_size // (dp * mbs)
    reps1 = tuple(Replica(gpu, A, 1, mbs, micro) for _ in range(dp))
    reps2 = tuple(Replica(gpu, zone2, 1, mbs, micro) for _ in range(dp))
    return Plan((Stage(0, 12, reps1), Stage(13, 25, reps2))).check(job)


def test_total_is_sum_of_breakdown(sim, job):
    for plan in (two_stage(job), two_stage(job, B), Plan.uniform(job, "V100-16", A, pp=3, dp=2)):
        e = sim.estimate(job, plan)
        assert math.isclose(sum(e.time_breakdown_s.values()), e.iteration_time_s, rel_tol=1e-12)
        assert math.isclose(
            sum(e.cost_breakdown_usd.values()), e.cost_per_iteration_usd, rel_tol=1e-12
        )
        for m in e.memory:
            assert sum(m.breakdown_bytes.values()) == m.peak_bytes
        assert e.peak_memory_bytes == max(m.peak_bytes for m in e.memory)
        assert all(v >= 0 for v in e.time_breakdown_s.values())


def test_memory_monotone_in_microbatch_size(sim, job):
    peaks = [
        sum(sim.replica_memory(job, StageSlice(0, 12, "A100-40", 1, mbs), 0, 2, 8).values())
        for mbs in (1, 2, 4, 8)
    ]
    assert peaks == sorted(peaks) and len(set(peaks)) == 4


def test_in_flight_is_min_of_stages_left_and_microbatches(sim, job):
    few = sim.replica_memory(job, StageSlice(0, 5, "A100-40", 1, 1), 0, 4, 2)
    many = sim.replica_memory(job, StageSlice(0, 5, "A100-40", 1, 1), 0, 4, 16)
    one = sim.replica_memory(job, StageSlice(0, 5, "A100-40", 1, 1), 0, 4, 1)
    assert many["activations"] == 2 * few["activations"] == 4 * one["activations"]


def test_more_replicas_less_compute_per_iteration(sim):
    job = Job.create("OPT-350M", global_batch_size=256, sequence_length=2048)
    t = [
        sim.estimate(job, Plan.uniform(job, "A100-40", A, pp=2, dp=dp, microbatch_size=4))
        for dp in (1, 2, 4)
    ]
    compute = [e.time_breakdown_s["compute"] for e in t]
    assert compute[0] > compute[1] > compute[2]
    assert t[0].iteration_time_s > t[2].iteration_time_s


def test_cross_zone_slower_and_costs_egress(sim, job):
    times, egress = [], []
    for zone in (A, B, WEST, EU):
        e = sim.estimate(job, two_stage(job, zone))
        times.append(e.iteration_time_s)
        egress.append(e.cost_breakdown_usd["egress"])
    assert times == sorted(times) and times[0] < times[-1]
    assert egress[0] == 0 and egress[1] > 0 and egress[3] > egress[2] > egress[1]


def test_cross_zone_data_parallel_slower(sim, job):
    micro = job.global_batch_size // 4  # 2 replicas x mbs 2
    same = Plan((Stage(0, 25, (Replica("A100-40", A, 1, 2, micro),) * 2),))
    cross = Plan(
        (
            Stage(
                0,
                25,
                (Replica("A100-40", A, 1, 2, micro), Replica("A100-40", EU, 1, 2, micro)),
            ),
        )
    )
    s, c = sim.estimate(job, same), sim.estimate(job, cross)
    assert c.time_breakdown_s["dp_sync"] > 5 * s.time_breakdown_s["dp_sync"]


def test_slow_replica_slows_only_unless_rebalanced(sim):
    job = Job.create("OPT-350M", global_batch_size=64, sequence_length=2048)
    fast = Replica("A100-40", A, 1, 2, 16)
    even = Plan((Stage(0, 25, (fast, Replica("V100-16", A, 1, 2, 16))),))
    balanced = Plan(
        (Stage(0, 25, (Replica("A100-40", A, 1, 2, 24), Replica("V100-16", A, 1, 2, 8))),)
    )
    both_fast = Plan((Stage(0, 25, (fast, fast)),))
    t_even, t_bal, t_fast = (
        sim.estimate(job, p).iteration_time_s for p in (even, balanced, both_fast)
    )
    assert t_fast < t_bal < t_even


def test_tp_comm_added_for_analytic_profiles(sim, job):
    st1 = sim.stage_time(job, StageSlice(0, 25, "A100-40", 1, 2))
    st2 = sim.stage_time(job, StageSlice(0, 25, "A100-40", 2, 2))
    assert st1.tp_comm_s == 0 and st2.tp_comm_s > 0
    assert st2.forward_s < st1.forward_s


def test_missing_profile_never_zero(sim, job):
    st = sim.stage_time(job, StageSlice(0, 25, "L4", 1, 3))
    assert st.forward_s > 0 and st.backward_s > 0 and st.optimizer_s > 0
    assert st.source == "analytic"


def test_estimate_round_trips_json_and_proto(sim):
    e = sim.estimate(example_job(), example_plan(), iterations=100)
    d = e.to_dict()
    for key in (
        "iteration_time_s",
        "peak_memory_bytes",
        "throughput_iters_per_s",
        "cost_per_iteration_usd",
        "fits",
        "breakdown",
    ):
        assert key in d
    assert d["run"]["cost_usd"] == pytest.approx(100 * e.cost_per_iteration_usd)
    back = Estimate.from_proto(e.to_proto())
    assert back.iteration_time_s == e.iteration_time_s
    assert back.memory == e.memory and back.time_breakdown_s == e.time_breakdown_s


def test_does_not_fit_is_a_result(sim):
    job = Job.create("LLaMA-3-8B", global_batch_size=8, sequence_length=4096)
    e = sim.estimate(job, Plan.uniform(job, "V100-16", A, pp=1, dp=1, microbatch_size=1))
    assert not e.fits and e.peak_memory_bytes > 16e9


def test_bad_plans_name_the_problem(sim, job):
    r = Replica("A100-40", A, 1, 2, 16)
    with pytest.raises(PlanError, match="cover every layer"):
        sim.estimate(job, Plan((Stage(0, 20, (r,)),)))
    with pytest.raises(PlanError, match="global batch"):
        sim.estimate(job, Plan((Stage(0, 25, (r,)),)))
    with pytest.raises(PlanError, match="exactly once"):
        Plan((Stage(0, 10, (r,)), Stage(12, 25, (r,))))
    with pytest.raises(Exception, match="exceeds the 8 GPUs"):
        Replica("A100-40", A, 16, 2, 16)
    with pytest.raises(Exception, match="unknown GPU type"):
        Replica("B300", A, 1, 2, 16)
    with pytest.raises(Exception, match="unknown zone"):
        Replica("A100-40", "mars-1a", 1, 2, 16)


# ---- imported Sailor data ----------------------------------------------------------------
def test_sailor_validation_within_bounds(sailor_sim_imported, validation_files):
    from sailor_sim import read_sailor_plan
    from sailor_sim.spec.options import ORIGINAL_SAILOR_RUNS

    for f in validation_files:
        rec = read_sailor_plan(f)
        job = Job.create("OPT-350", rec.global_batch_size, 2048, options=ORIGINAL_SAILOR_RUNS)
        e = sailor_sim_imported.estimate(job, rec.plan)
        assert e.sources == ("imported:sailor",)
        assert abs(e.iteration_time_s / rec.measured_iteration_s - 1) < 0.25, f
        assert abs(e.peak_memory_bytes / rec.measured_peak_memory_bytes - 1) < 0.2, f


def test_egress_fast_path_matches_reference(sim, job):
    from sailor_sim.simulate import timing

    micro = job.global_batch_size // 8  # 4 replicas x mbs 2
    reps = (
        Replica("A100-40", A, 1, 2, micro),
        Replica("A100-40", B, 2, 2, micro),
        Replica("V100-16", WEST, 2, 2, micro),
        Replica("V100-16", EU, 4, 2, micro),
    )
    plan = Plan((Stage(0, 9, reps), Stage(10, 25, reps[::-1]))).check(job)
    e = sim.estimate(job, plan)
    assert e.cost_breakdown_usd["egress"] == pytest.approx(
        timing.egress_usd(sim.network, job, plan)
    )
    assert e.cost_breakdown_usd["egress"] > 0


def test_estimate_composes_public_components(sim, job):
    """One pipeline: estimate() == pipeline_time(stage_time, p2p_time) + dp/optimizer tail
    + the per-step whole-world all-reduce (step sync)."""
    from sailor_sim.simulate import timing

    plan = two_stage(job, B, dp=1, mbs=2)
    s0, s1 = plan.stages
    r0, r1 = s0.replicas[0], s1.replicas[0]
    times = [
        sim.stage_time(job, StageSlice(s.first_layer, s.last_layer, "A100-40", 1, 2))
        for s in (s0, s1)
    ]
    p2p = [sim.p2p_time(job, s0.last_layer, r0, r1)]
    pipe = timing.pipeline_time(times, p2p, r0.num_microbatches)
    per_mb = [t.per_microbatch_s + timing.MICROBATCH_OVERHEAD_S for t in times]
    assert pipe.total_s == pytest.approx(timing.pipeline_total(per_mb, p2p, r0.num_microbatches))
    tail = max(times[0].optimizer_s, times[1].optimizer_s - times[0].backward_s - p2p[0], 0)
    e = sim.estimate(job, plan)
    sync = sim.plan_step_sync_time(plan)
    link = sim.network.link(Endpoint(A, "A100-40", 1), Endpoint(B, "A100-40", 1))  # slowest
    assert sync == pytest.approx(timing.step_sync_time(link, 2)) and sync >= 2 * link.latency_s
    assert e.time_breakdown_s["step_sync"] == sync
    assert e.iteration_time_s == pytest.approx(pipe.total_s + tail + sync)
    mem = sim.replica_memory(job, StageSlice(0, 12, "A100-40", 1, 2), 0, 2, r0.num_microbatches)
    assert e.memory[0].breakdown_bytes == mem


def test_profile_dir_measured_entries_win(tmp_path, job):
    from sailor_sim import save_profile_dir
    from sailor_sim.profiles.store import LayerProfile, ProfileEntry, ProfileKey, ProfileStore

    layers = tuple(LayerProfile(1e-3, 2e-3, 1e-5) for _ in range(job.model.num_layer_ids))
    key = ProfileKey("OPT-350M", "A100-40", "fp32", 2, 2)
    save_profile_dir(ProfileStore([ProfileEntry(key, 2048, layers, "measured")]), tmp_path)
    (tmp_path / "links.json").write_text('{"format": "sailor-network/1", "links": []}')
    measured = Simulator.from_profile_dir(tmp_path)
    st = measured.stage_time(job, StageSlice(0, 25, "A100-40", 2, 2))
    assert st.source == "measured" and st.tp_comm_s == 0.0  # measured with TP: comm inside
    assert st.forward_s == pytest.approx(26e-3) and st.backward_s == pytest.approx(52e-3)
    other = measured.stage_time(job, StageSlice(0, 25, "A100-40", 2, 8))
    assert other.source.startswith("interpolated:roofline-scaled from mbs 2")


def test_whole_run_figures_from_tokens(sim):
    job, plan = example_job(), example_plan()
    tokens = 1000 * job.global_batch_size * job.sequence_length
    e = sim.estimate(job, plan, tokens=tokens)
    assert e.run_iterations == pytest.approx(1000)
    assert e.run_hours == pytest.approx(1000 * e.iteration_time_s / 3600)
    assert e.cost_per_hour_usd == pytest.approx(
        e.cost_per_iteration_usd * 3600 / e.iteration_time_s
    )


def test_fast_estimate_equals_constructed(sim):
    e = sim.estimate(example_job(), example_plan())
    fields = {k: v for k, v in e.__dict__.items()}
    fields["memory"] = e.memory
    assert Estimate(**fields) == e
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.iteration_time_s = 1.0


def test_equal_plans_built_separately_agree(sim, job):
    """Interned cache keys: equal replicas built apart give identical estimates; a one-field
    difference (zone) gives a different one."""
    a = sim.estimate(job, two_stage(job, B))
    b = Simulator().estimate(job, two_stage(job, B))
    c = sim.estimate(job, two_stage(job, A))
    assert a.to_dict() == b.to_dict()
    assert a.iteration_time_s != c.iteration_time_s


def test_new_profiles_invalidate_cached_numbers(job):
    from sailor_sim.profiles.store import LayerProfile, ProfileEntry, ProfileKey

    sim = Simulator()
    plan = two_stage(job, A, dp=2, mbs=2)
    before = sim.estimate(job, plan)
    slow = tuple(LayerProfile(1.0, 2.0, 0.01) for _ in range(job.model.num_layer_ids))
    sim.profiles.add(
        ProfileEntry(ProfileKey("OPT-350M", "A100-40", "fp32", 2, 1), 2048, slow, "measured")
    )
    after = sim.estimate(job, plan)
    assert after.iteration_time_s > 10 * before.iteration_time_s
    assert after.sources == ("measured",)


@pytest.mark.parametrize("gpu", ["A100-40", "GH-96", "L4", "CPU"])
def test_peak_bytes_equals_sum_of_terms(gpu):
    from sailor_sim.catalog.gpus import get_gpu
    from sailor_sim.simulate.memory import (
        framework_overhead,
        memory_terms,
        peak_bytes,
        static_bytes,
    )

    g = get_gpu(gpu)
    for dtype, opt in (("fp32", "adam"), ("bf16", "sgd")):
        if not g.supports(dtype):
            continue
        args = dict(
            params=123_457,
            activation_per_microbatch=98_765,
            in_flight_microbatches=3,
            transient=4_321,
            p2p_buffer=2_222,
            communicators=3,
        )
        terms = memory_terms(gpu=g, dtype=dtype, optimizer=opt, **args)
        fast = peak_bytes(
            framework_overhead(g),
            static_bytes(args["params"], dtype, opt),
            98_765,
            3,
            4_321,
            2_222,
            3,
        )
        assert fast == sum(terms.values())


def test_ring_time_and_replica_peak_are_the_estimates_components() -> None:
    """The components the planner calls give exactly what ``estimate`` composes."""
    from sailor_sim import get_gpu
    from sailor_sim.simulate import timing

    sim = Simulator()
    job = Job.create("OPT-350M", 64, 2048)
    reps = (
        Replica("GH-96", "us-central1-a", 1, 4, 2),
        Replica("GH-96", "us-central1-b", 1, 4, 2),
        Replica("A100-40", "us-central1-a", 2, 4, 2),
        Replica("GH-96", "us-central1-a", 1, 4, 2),
    )
    seconds, usd = sim.ring_time(job, 0, 9, timing.ring_kinds(reps))
    assert seconds == sim.dp_sync_time(job, 0, 9, reps) > 0
    grad = sim.grad_bytes(job, 0, 9)
    assert usd == pytest.approx(grad / 1e9 * sim.dp_egress_per_gb(reps), rel=1e-12) and usd > 0
    # GH200 rings run at their own (lower) bus efficiency.
    assert timing.bus_efficiency("GH-96") == 0.4 < timing.bus_efficiency("A100-40")
    last = job.model.head_layer_id
    for i, (first, end) in enumerate([(0, 12), (13, last)]):
        peak, cap = sim.replica_peak(job, StageSlice(first, end, "GH-96", 1, 4), i, 2, 8, 4)
        terms = sim.replica_memory(job, StageSlice(first, end, "GH-96", 1, 4), i, 2, 8, 4)
        assert peak == sum(terms.values()) and cap == get_gpu("GH-96").memory_bytes
    # The head's transient is its logits in the training dtype, beside the stashed fp32
    # softmax (which becomes the gradient in place): mbs 4 x seq 2048 x vocab / tp 2.
    terms = sim.replica_memory(job, StageSlice(13, last, "GH-96", 2, 4), 1, 2, 8, 4)
    assert terms["transient"] == 4 * 2048 * job.model.vocab_size // 2 * dtype_bytes(job.dtype)


def _cpu_links(folder, **ring) -> Simulator:
    """A profile folder holding only a CPU<->CPU link (4 GB/s, 0.1 ms), plus ``ring``."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    link = {
        "src": {"zone": "local", "gpu_type": "CPU", "count": 1},
        "dst": {"zone": "local", "gpu_type": "CPU", "count": 1},
        "max_bandwidth": 4e9,
        "latency_s": 1e-4,
        "source": "measured: test",
        **ring,
    }
    (folder / "links.json").write_text(json.dumps({"format": "sailor-network/1", "links": [link]}))
    return Simulator.from_profile_dir(folder)


def test_a_measured_ring_prices_data_parallel_and_step_sync(tmp_path):
    """A link with a measured ring all-reduce (bus bandwidth, latency per ring step) prices
    the DP ring and the step sync with it, not with p2p x the platform's efficiency."""
    from sailor_sim.simulate import timing

    job = Job.create("tiny-gpt", 16, 64)
    plan = Plan((Stage(0, 7, (Replica("CPU", "local", 1, 4, 1),) * 4),)).check(job)
    from sailor_sim.simulate import comm

    # latency steps: the ring's 2(n-1) or a tree's 2 log2 n, the fewer (comm.latency_steps)
    replicas, n, steps = plan.stages[0].replicas, 4, comm.latency_steps(4)
    p2p = _cpu_links(tmp_path / "p2p")
    ring = _cpu_links(tmp_path / "ring", ring_bus_bandwidth=5e8, ring_hop_latency_s=2e-3)
    volume = 2 * (n - 1) / n * p2p.grad_bytes(job, 0, 7)
    efficiency = timing.bus_efficiency("CPU")
    assert p2p.dp_sync_time(job, 0, 7, replicas) == pytest.approx(
        volume / (4e9 * efficiency) + steps * 1e-4
    )
    assert ring.dp_sync_time(job, 0, 7, replicas) == pytest.approx(volume / 5e8 + steps * 2e-3)
    step_sync = ring.estimate(job, plan).time_breakdown_s["step_sync"]
    assert step_sync == pytest.approx(2 * (n - 1) / n * timing.STEP_SYNC_BYTES / 5e8 + steps * 2e-3)


@pytest.mark.parametrize(
    "ring, message",
    [
        ({"ring_bus_bandwidth": 5e8}, "come together"),
        ({"ring_bus_bandwidth": -1, "ring_hop_latency_s": 1e-3}, "must be > 0"),
        ({"ring_bus_bandwidth": "fast", "ring_hop_latency_s": 1e-3}, "as numbers"),
    ],
)
def test_bad_ring_fields_name_the_field(tmp_path, ring, message):
    from sailor_sim.errors import ProfileError

    with pytest.raises(ProfileError, match=message) as info:
        _cpu_links(tmp_path, **ring)
    assert "links[0].ring_bus_bandwidth" in str(info.value)


def test_ring_time_keeps_edge_curves_not_answers_across_ring_sizes() -> None:
    """``ring_time`` keeps each edge's curve and efficiency (``cache.ring_curve``) and each
    hierarchical run's seconds across ring sizes; every answer equals the uncached one: a
    fresh simulator per question, and ``timing.edge_allreduce_time`` /
    ``hierarchical_allreduce_time`` edge by edge, exactly (no tolerance)."""
    from sailor_sim.simulate import timing

    warm = Simulator()
    job = Job.create("OPT-350M", 64, 2048)
    rings = []
    for n in (2, 3, 5, 8, 16, 33, 64):
        rings += [
            ((("us-central1-a", "A100-40", 1), n),),  # one run: flat or hierarchical
            ((("us-central1-a", "A100-40", 2), n), (("us-central1-b", "A100-40", 2), 1)),
            ((("us-central1-a", "GH-96", 1), n), (("us-central1-a", "V100-16", 4), 2)),
            ((("us-central1-a", "V100-16", 1), 1), (("us-west1-a", "V100-16", 2), n)),
        ]
    for nbytes in (None, 3.5e8):
        for kinds in rings + rings[::-1]:  # warm: earlier sizes cached, in both orders
            got = warm.ring_time(job, 0, 9, kinds, nbytes)
            assert got == Simulator().ring_time(job, 0, 9, kinds, nbytes)
            grad = warm.grad_bytes(job, 0, 9) if nbytes is None else nbytes
            n, counts, edges = sum(c for _, c in kinds), dict(kinds), []
            for a, b in timing.kind_edges(kinds):
                if a == b and warm._edge_curve(a, b) is None:
                    run = counts[a]
                    edges.append(timing.hierarchical_allreduce_time(warm.network, a, run, grad))
                else:
                    edges.append(timing.edge_allreduce_time(warm.network, a, b, n, grad))
            assert got[0] == max(edges)
    assert warm.cache.ring_curve and warm.cache.ring_hierarchical


def test_tied_head_is_held_once_in_one_stage(sim):
    """A tied model (GPT-1.7B, Megatron GPT) in one stage holds the shared matrix once: its
    weights, gradients, optimizer states and all-reduce volume are the untied model's less
    the head's matrix; split over two stages the head keeps its own copy (counted by
    ``params(head)``), as the runtime's ``engine.parallel.tied`` does."""
    tied = Job.create("GPT-1.7B", global_batch_size=8, sequence_length=1024, dtype="bf16")
    model = dataclasses.replace(tied.model, tie_word_embeddings=False)
    untied = dataclasses.replace(tied, model=model)
    head = tied.model.head_layer_id
    matrix = tied.model.param_terms(head, 1)["lm_head"]
    assert matrix == tied.model.vocab_size * tied.model.hidden_size
    one = StageSlice(0, head, "A100-80", 1, 1)
    weights = {
        j.model.tie_word_embeddings: sim.replica_memory(j, one, 0, 1, 8, dp=2)["weights"]
        for j in (tied, untied)
    }
    assert weights[False] - weights[True] == matrix * 2  # bf16 weights
    assert sim.unsharded_params(untied, 0, head) - sim.unsharded_params(tied, 0, head) == matrix
    # over two stages the last one holds the head's copy whether tied or not
    last = StageSlice(head - 2, head, "A100-80", 1, 1)
    assert sim.replica_memory(tied, last, 1, 2, 8) == sim.replica_memory(untied, last, 1, 2, 8)
    one_stage = Plan.uniform(tied, "A100-80", "us-central1-a", pp=1, dp=2, tp=1)
    t, u = sim.estimate(tied, one_stage), sim.estimate(untied, one_stage)
    assert t.time_breakdown_s["optimizer"] < u.time_breakdown_s["optimizer"]
    assert t.time_breakdown_s["dp_sync"] < u.time_breakdown_s["dp_sync"]
    assert t.peak_memory_bytes < u.peak_memory_bytes
