"""Plans beyond the measured profiles are flagged, or refused on request (issue 22)."""

import json
import sys

import pytest
from rich.console import Console

from sailor_planner.errors import NoFeasiblePlanError
from sailor_planner.planrun import PlanArgs, run_plan
from sailor_planner.request import SearchOptions
from sailor_sim import Inventory, Job

JOB = Job.create("OPT-350M", 1024, 2048, "fp32")
INVENTORY = Inventory.parse(["A100-40@us-central1-a=32"])


def test_a_microbatch_beyond_the_profiles_is_flagged(sailor_planner) -> None:
    """The Sailor profiles stop at microbatch 8; 16 is roofline-scaled from 8 and the plan
    said nothing of it."""
    options = SearchOptions(microbatch_sizes=(16,), search_execution_options=False)
    best = sailor_planner.plan(JOB, INVENTORY, options).best
    assert {r.microbatch_size for s in best.plan.stages for r in s.replicas} == {16}
    assert best.extrapolated and "mbs 8" in best.extrapolated[0]
    assert best.to_dict()["extrapolated"] == list(best.extrapolated)
    within = sailor_planner.plan(JOB, INVENTORY, SearchOptions(microbatch_sizes=(4, 8))).best
    assert within.extrapolated == ()


def test_profiled_only_refuses_them(sailor_planner) -> None:
    options = SearchOptions(
        microbatch_sizes=(8, 16), profiled_only=True, search_execution_options=False
    )
    best = sailor_planner.plan(JOB, INVENTORY, options).best
    assert best.extrapolated == ()
    with pytest.raises(NoFeasiblePlanError):
        only_16 = SearchOptions(microbatch_sizes=(16,), profiled_only=True)
        sailor_planner.plan(JOB, INVENTORY, only_16)


def test_cli_notes_an_extrapolated_plan(sailor_root, capsys) -> None:
    gpus = ("A100-40@us-central1-a=32",)
    args = PlanArgs("OPT-350M", 1024, 2048, gpus=gpus, sailor_root=sailor_root)
    wide = Console(file=sys.stdout, width=400)
    assert run_plan(args, out=wide) == 0
    assert "extrapolated" not in capsys.readouterr().out  # mbs 16 is not the best here
    assert run_plan(PlanArgs(**{**args.__dict__, "as_json": True})) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["plans"][0]["extrapolated"] == []


def test_extrapolation_notes_name_the_plan_and_the_source(sailor_planner) -> None:
    from sailor_planner.planrun import extrapolation_notes

    options = SearchOptions(microbatch_sizes=(16,), search_execution_options=False)
    notes = extrapolation_notes(sailor_planner.plan(JOB, INVENTORY, options).plans)
    assert notes and notes[0].startswith("* plan #1: profiles extrapolated") and "mbs 8" in notes[0]
