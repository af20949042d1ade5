"""The built-in example: OPT-350M, global batch 1024, A100-40 and V100-16 GPUs in two zones."""

from __future__ import annotations

from .job import Inventory, Job
from .plan import Plan, Replica, Stage

EXAMPLE_ZONES = ("us-central1-a", "us-central1-b")


def example_job() -> Job:
    return Job.create("OPT-350M", global_batch_size=1024, sequence_length=2048, dtype="fp32")


def example_inventory() -> Inventory:
    a, b = EXAMPLE_ZONES
    return Inventory.of(
        {("A100-40", a): 16, ("V100-16", a): 16, ("A100-40", b): 8, ("V100-16", b): 16}
    )


def example_plan() -> Plan:
    """A hand-written heterogeneous plan: 2 stages; stage 0 on A100-40s in two zones, stage 1
    on V100-16s; 4 pipelines with microbatch 2."""
    a, b = EXAMPLE_ZONES
    first = (Replica("A100-40", a, 2, 2, 128),) * 2 + (Replica("A100-40", b, 2, 2, 128),) * 2
    second = (Replica("V100-16", a, 4, 2, 128),) * 2 + (Replica("V100-16", b, 4, 2, 128),) * 2
    return Plan((Stage(0, 10, first), Stage(11, 25, second))).check(example_job())
