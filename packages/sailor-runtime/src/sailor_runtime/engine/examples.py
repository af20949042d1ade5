"""Heterogeneous example plans for the tiny models (tests, benchmarks, demos).

Global batch 8, sequence 32, on the emulated ``CPU`` device type in zone ``local``. Together
they cover pipeline depth 1-4, uneven layer ranges, TP 1/2/4 mixed across stages and across the
replicas of a stage, replicas with different microbatch sizes, and both schedules.
"""

from __future__ import annotations

from sailor_sim import ExecutionOptions, Job, Plan, Replica, Stage


def R(tp: int, mbs: int, n: int) -> Replica:
    return Replica("CPU", "local", tp, mbs, n)


JOBS = {"gpt": Job.create("tiny-gpt", 8, 32), "llama": Job.create("tiny-llama", 8, 32)}

# name -> (model key in JOBS, plan, schedule)
PLANS: dict[str, tuple[str, Plan, str]] = {
    "pp1_dp2_mbs4x1_2x2_gpipe": ("gpt", Plan((Stage(0, 7, (R(1, 4, 1), R(1, 2, 2))),)), "gpipe"),
    "pp2_uneven_tp2_tp1": (
        "gpt",
        Plan((Stage(0, 2, (R(2, 2, 4),)), Stage(3, 7, (R(1, 2, 4),)))),
        "1f1b",
    ),
    "pp1_dp2_tp2_tp1": ("llama", Plan((Stage(0, 7, (R(2, 2, 2), R(1, 1, 4))),)), "1f1b"),
    "pp3_dp2_mixed_tp": (
        "gpt",
        Plan(
            (
                Stage(0, 1, (R(1, 1, 4), R(2, 2, 2))),
                Stage(2, 5, (R(2, 1, 4), R(1, 2, 2))),
                Stage(6, 7, (R(1, 1, 4), R(1, 2, 2))),
            )
        ),
        "1f1b",
    ),
    "pp4_tp1_2_4_1": (
        "llama",
        Plan(
            (
                Stage(0, 0, (R(1, 1, 8),)),
                Stage(1, 3, (R(2, 1, 8),)),
                Stage(4, 6, (R(4, 1, 8),)),
                Stage(7, 7, (R(1, 1, 8),)),
            )
        ),
        "1f1b",
    ),
    "pp1_dp3_tp4_1_2": (
        "llama",
        Plan((Stage(0, 7, (R(4, 1, 2), R(1, 2, 1), R(2, 2, 2))),)),
        "1f1b",
    ),
}

# Resharding: plan A then plan B (other depth, TP degrees and replica count), for tiny-gpt.
RESHARD_A = Plan((Stage(0, 3, (R(1, 2, 2), R(2, 4, 1))), Stage(4, 7, (R(2, 2, 2), R(1, 4, 1)))))
RESHARD_B = Plan(
    (Stage(0, 1, (R(4, 1, 8),)), Stage(2, 4, (R(1, 1, 8),)), Stage(5, 7, (R(2, 1, 8),)))
)

# Interleaved 1F1B (virtual stages), tiny-gpt: name -> (plan, virtual_stages). The job is
# ``interleaved_job(v)``: the simulator's options carry the same virtual_stages as the engine's.
PP2 = Plan((Stage(0, 3, (R(1, 2, 4),)), Stage(4, 7, (R(1, 2, 4),))))
INTERLEAVED: dict[str, tuple[Plan, int]] = {
    "pp2_v1": (PP2, 1),
    "pp2_v2": (PP2, 2),
    "pp2_v2_hetero": (  # two worker types in stage 0, TP 2/1 across the ring, mbs 2 and 1
        Plan(
            (
                Stage(0, 3, (R(2, 2, 2), Replica("cpu-2t", "local", 1, 1, 4))),
                Stage(4, 7, (R(1, 2, 2), R(2, 1, 4))),
            )
        ),
        2,
    ),
}


def interleaved_job(virtual_stages: int) -> Job:
    """tiny-gpt as ``JOBS['gpt']``, planned with ``virtual_stages`` model chunks per rank."""
    return Job.create("tiny-gpt", 8, 32, options=ExecutionOptions(virtual_stages=virtual_stages))
