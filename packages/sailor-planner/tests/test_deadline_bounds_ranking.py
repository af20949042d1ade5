"""A client's deadline bounds the whole Plan call, not only the branch and bound.

Real servers on 127.0.0.1:0 and real clients. After the search, the planner re-scores the
best candidates and puts each ranked plan through the option search (recomputation, ZeRO,
SP variants: ``execution.best_options``) and the Pareto points too. With ``top_k`` 100 on a
large inventory that is seconds of work, which ran after the search's share of the deadline
without looking at the clock or at the caller: the client got DEADLINE_EXCEEDED instead of
the partial answer the README promises, and the search slot stayed busy after the caller
had gone.
"""

from __future__ import annotations

import time

import grpc
import pytest

from sailor_planner.proto import planner_pb2_grpc
from sailor_planner.service.client import PlannerClient
from sailor_planner.service.limits import ServerLimits
from sailor_planner.service.server import create_server
from sailor_sim import Inventory, Job
from sailor_testing import wait_until

JOB = Job.create("OPT-350M", 1024, 2048)
ZONES = (
    "us-central1-a", "us-central1-b", "us-central1-c", "us-east1-b",
    "us-east1-c", "us-west1-a", "us-west1-b", "europe-west4-a",
)  # fmt: skip
TYPES = ("A100-40", "V100-16", "A100-80", "H100-80")
WIDE = Inventory.of({(g, z): 128 for g in TYPES for z in ZONES})
"""4,096 GPUs in 32 pools: hundreds of admitted candidates, so top_k 100 ranks 100 plans."""


@pytest.fixture()
def one_slot():
    server, port = create_server(
        "127.0.0.1:0", limits=ServerLimits(max_searches=1, max_queued=1, max_candidates=10**9)
    )
    yield f"127.0.0.1:{port}", server.planner_service
    server.stop(grace=None)


@pytest.mark.parametrize("deadline_s", [4.0, 6.0])
def test_many_ranked_plans_come_back_partial_within_the_deadline(one_slot, deadline_s):
    address, service = one_slot
    with PlannerClient(address) as client:
        started = time.monotonic()
        result = client.plan(JOB, WIDE, top_k=100, pareto_points=20, timeout_s=deadline_s)
        took = time.monotonic() - started
    assert result.partial and result.plans, "the best plans so far, marked partial"
    assert took < deadline_s
    wait_until(lambda: service.slots.load() == (0, 0), 0.5)


def test_a_cancel_during_the_option_search_frees_the_slot(one_slot):
    """Cancelled once the search's share of the deadline is over (the option search of the
    100 ranked plans runs then): the slot is free within a poll, and the next call served."""
    address, service = one_slot
    with grpc.insecure_channel(address) as channel:
        stub = planner_pb2_grpc.PlannerServiceStub(channel)
        request = PlannerClient.request(JOB, WIDE, top_k=100)
        future = stub.Plan.future(request, timeout=8.0)  # search share: (8 - 0.15) x 0.7 s
        wait_until(lambda: service.slots.load()[0] == 1, 10)
        time.sleep(6.0)
        future.cancel()
        freed = wait_until(lambda: service.slots.load() == (0, 0), 5)
        assert freed < 0.5, f"the ranking ran on {freed:.2f} s after the cancel"
