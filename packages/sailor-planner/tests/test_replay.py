"""Trace replay: each policy's samples, dollars, re-plans and reconfiguration costs, checked
against the segments of its own timeline and the reconfiguration model; and the CLI."""

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sailor_planner.cli import app
from sailor_planner.replay.policies import pays_off
from sailor_planner.replay.reconfig import ReconfigModel
from sailor_planner.replay.request import ReplayRequest
from sailor_planner.replay.run import replay
from sailor_planner.replay.trace import read_trace
from sailor_planner.request import SearchOptions
from sailor_sim import Job, price_per_gpu_hour

JOB = Job.create("OPT-350M", 256, 2048)
MODEL = ReconfigModel(plan_s=0.25, checkpoint_interval_s=1000.0)
HEADER = "timestamp,zone,gpu_type,available,price,preempted\n"
A100 = "us-central1-a,A100-40"


def trace_file(tmp_path: Path, rows: list[str], name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def loss_then_join(tmp_path_factory, planner):
    path = trace_file(
        tmp_path_factory.mktemp("trace"),
        [f"0,{A100},16,,", f"3600,{A100},8,,", f"7200,{A100},16,,", f"10800,{A100},16,,"],
    )
    return replay(planner, ReplayRequest(JOB, read_trace(path), SearchOptions(), MODEL))


def events_of(result, policy):
    return [e for e in result.events if e.policy == policy]


def test_summaries_are_the_sums_of_the_timeline(loss_then_join) -> None:
    price = price_per_gpu_hour("A100-40", "us-central1-a")
    for summary in loss_then_join.summaries:
        events = events_of(loss_then_join, summary.policy)
        segments = loss_then_join.timeline(summary.policy)
        trained = sum(s.samples_per_s * (s.end_s - s.start_s) for s in segments)
        assert summary.samples == pytest.approx(trained - summary.lost_samples)
        assert summary.samples == pytest.approx(sum(e.samples for e in events))
        billed = sum(s.gpus * price * (s.end_s - s.start_s) / 3600 for s in segments)
        assert summary.usd == pytest.approx(billed)  # one zone: no egress
        assert summary.usd_per_million_tokens == pytest.approx(
            summary.usd / (summary.samples * JOB.sequence_length / 1e6)
        )
        assert summary.mean_samples_per_s == pytest.approx(summary.samples / 10800)


def test_static_stops_while_its_gpus_are_gone_and_resumes(loss_then_join) -> None:
    static = events_of(loss_then_join, "static")
    assert static[0].gpus_used == 16, "the best plan on 16 A100s uses them all"
    assert static[1].gpus_used == 0 and static[1].samples <= 0 and static[1].usd == 0
    assert static[2].gpus_used == 16 and static[2].reconfigured and not static[2].replanned
    assert static[2].plan == static[0].plan


def test_replan_on_loss_ignores_joins_and_sailor_takes_them(loss_then_join) -> None:
    on_loss = events_of(loss_then_join, "replan-on-loss")
    assert [e.replanned for e in on_loss] == [True, True, False]
    assert on_loss[2].gpus_used <= 8
    sailor = events_of(loss_then_join, "sailor")
    assert [e.replanned for e in sailor] == [True, True, True]
    assert sailor[2].gpus_used == 16, "an hour of 2x the GPUs pays for one switch"
    by_name = {s.policy: s for s in loss_then_join.summaries}
    assert by_name["sailor"].samples > by_name["replan-on-loss"].samples > by_name["static"].samples


def test_a_reconfiguration_costs_the_model_downtime_and_the_work_since_the_checkpoint(
    loss_then_join,
) -> None:
    first, second = events_of(loss_then_join, "sailor")[:2]
    down = MODEL.debounce_s + 0.25 + MODEL.place_stop_s + MODEL.restore_s(JOB) + MODEL.restart_s
    assert second.reconfigure_s == pytest.approx(down)  # announced loss: no detect
    last_ckpt = max(s.end_s for s in first.segments if s.kind == "checkpoint")
    assert second.lost_samples == pytest.approx(first.samples_per_s * (3600 - last_ckpt))
    stalls = [s.end_s - s.start_s for s in first.segments if s.kind == "checkpoint"]
    assert stalls and all(s == pytest.approx(MODEL.save_s(JOB)) for s in stalls)


def test_preemption_adds_detection_and_spot_price_is_billed(tmp_path, planner) -> None:
    path = trace_file(
        tmp_path,
        [f"0,{A100},16,1.25,", f"3600,{A100},8,1.25,8", f"7200,{A100},8,1.25,"],
    )
    result = replay(
        planner, ReplayRequest(JOB, read_trace(path), reconfig=MODEL, policies=("sailor",))
    )
    first, second = result.events
    down = MODEL.detect_s + MODEL.debounce_s + 0.25 + MODEL.place_stop_s
    assert second.reconfigure_s == pytest.approx(down + MODEL.restore_s(JOB) + MODEL.restart_s)
    assert second.lost_samples > 0
    held_h = sum(s.gpus * (s.end_s - s.start_s) for s in result.timeline("sailor")) / 3600
    assert result.summaries[0].usd == pytest.approx(1.25 * held_h)


def test_pays_off_weighs_the_switch() -> None:
    # 100 -> 200 samples/s, 60 s down, 1000 samples lost: worth it over an hour, not over 70 s.
    assert pays_off("throughput", (100, 10), (200, 20), 3600, 60, 1000)
    assert not pays_off("throughput", (100, 10), (200, 20), 70, 60, 1000)
    # Cost: same $/sample per second of training, so the switch never pays.
    assert not pays_off("cost", (100, 10), (200, 20), 3600, 60, 1000)
    assert pays_off("cost", (100, 10), (100, 5), 3600, 60, 1000)


def test_reconfig_model_rejects_bad_parameters() -> None:
    from sailor_planner.errors import RequestError

    with pytest.raises(RequestError, match="reconfig.checkpoint_interval_s: must be > 0"):
        ReconfigModel(checkpoint_interval_s=0)
    with pytest.raises(RequestError, match="reconfig.detect_s"):
        ReconfigModel(detect_s=math.nan)


def test_cli_prints_the_policy_table_json_and_a_png(tmp_path) -> None:
    path = trace_file(tmp_path, [f"0,{A100},16,,", f"1800,{A100},8,,", f"3600,{A100},8,,"])
    args = ["replay", "--trace", str(path), "--model", "OPT-350M", "--gbs", "256"]
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0, table.output
    for name in ("sailor", "static", "single-type", "replan-on-loss", "$/1M tok"):
        assert name in table.output
    png = tmp_path / "replay.png"
    out = CliRunner().invoke(app, [*args, "--json", "--plot", str(png)])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert [p["policy"] for p in data["policies"]] == [
        "sailor", "static", "single-type", "replan-on-loss",
    ]  # fmt: skip
    assert len(data["events"]) == 4 * 2 and data["trace"]["states"] == 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("rows", "extra", "expected"),
    [
        ([f"0,{A100},lots,,"], [], "error: trace.csv row 1, column available"),
        ([f"0,{A100},8,,", f"60,{A100},8,,"], ["--policies", "greedy"], "unknown policy greedy"),
        ([f"0,{A100},8,,"], [], "--hold-last"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, rows, extra, expected) -> None:
    path = trace_file(tmp_path, rows, "trace.csv")
    out = CliRunner().invoke(
        app, ["replay", "--trace", str(path), "--model", "OPT-350M", "--gbs", "256", *extra]
    )
    assert out.exit_code == 2
    assert expected in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_join_waits_for_the_nodes_to_boot_and_a_running_start_is_free(tmp_path, planner):
    path = trace_file(tmp_path, [f"0,{A100},8,,", f"3600,{A100},16,,", f"7200,{A100},16,,"])
    booting = ReconfigModel(plan_s=0.25, checkpoint_interval_s=1000.0, provision_s=600.0)
    request = ReplayRequest(
        JOB, read_trace(path), reconfig=booting, policies=("every-change",), started=True
    )
    result = replay(planner, request)
    first, join = result.events
    assert first.reconfigure_s == 0 and not first.reconfigured  # already running at the start
    old = [s for s in join.segments if s.gpus == first.gpus_used]
    assert old[0].kind == "train" and old[0].samples_per_s == first.samples_per_s
    assert sum(s.end_s - s.start_s for s in old) == pytest.approx(600.0)  # trains while booting
    switch = next(s for s in join.segments if s.kind == "reconfigure")
    assert switch.start_s == pytest.approx(3600 + 600) and join.gpus_used == 16
    # The work lost is what the old plan trained since its last checkpoint, at the switch.
    trained = [s for s in [*first.segments, *old] if s.kind in ("train", "checkpoint")]
    last_ckpt = max(s.end_s for s in trained if s.kind == "checkpoint")
    assert join.lost_samples == pytest.approx(first.samples_per_s * (4200 - last_ckpt))


def test_a_join_booting_on_the_plans_machine_slows_it_by_the_stall(tmp_path, planner):
    """``provision_stall_s`` of training is lost while the joining nodes start (one shared
    machine); the rest of the replay is unchanged."""
    path = trace_file(tmp_path, [f"0,{A100},8,,", f"3600,{A100},16,,", f"7200,{A100},16,,"])
    trace = read_trace(path)
    common = {"plan_s": 0.25, "checkpoint_interval_s": 1e6, "provision_s": 600.0}
    runs = [
        replay(
            planner,
            ReplayRequest(
                JOB,
                trace,
                reconfig=ReconfigModel(**common, provision_stall_s=stall),
                policies=("every-change",),
                started=True,
            ),
        )
        for stall in (0.0, 150.0)
    ]
    free, stalled = (r.events[1] for r in runs)
    rate = runs[0].events[0].samples_per_s
    trained = [e.samples + e.lost_samples for e in (free, stalled)]  # before work is redone
    assert trained[0] - trained[1] == pytest.approx(rate * 150.0)
    booting = [s for s in stalled.segments if s.gpus == runs[1].events[0].gpus_used]
    assert booting[0].samples_per_s == pytest.approx(rate * 0.75)
    from sailor_planner.errors import RequestError

    with pytest.raises(RequestError, match="reconfig.provision_stall_s: must be <= provision_s"):
        ReconfigModel(provision_s=10.0, provision_stall_s=20.0)


def test_cli_plan_s_makes_the_replay_reproducible(tmp_path) -> None:
    path = trace_file(tmp_path, [f"0,{A100},16,,", f"1800,{A100},8,,", f"3600,{A100},16,,"])
    args = ["replay", "--trace", str(path), "--model", "OPT-350M", "--gbs", "256", "--json"]
    runs = [json.loads(CliRunner().invoke(app, [*args, "--plan-s", "2"]).stdout) for _ in "ab"]
    for run in runs:
        run.pop("replay_time_s")
    assert runs[0] == runs[1] and runs[0]["reconfig"]["plan_s"] == 2.0


def test_a_state_held_open_for_centuries_replays_at_once_with_exact_totals(tmp_path, planner):
    """The last state held open for ~3,000 years (the most hold_last_s takes, trace.MAX_SECONDS;
    hostile input over the Replay RPC) is integrated in closed form, not one step per
    checkpoint; samples and dollars equal the step-by-step sums over a shorter horizon scaled
    by the cycles."""
    from sailor_planner.replay.trace import MAX_SECONDS

    short, long_ = 10 * 1000.0, MAX_SECONDS
    results = {}
    for hold in (short, long_):
        path = trace_file(tmp_path, [f"0,{A100},8,,"], name=f"h{hold:.0f}.csv")
        request = ReplayRequest(
            JOB, read_trace(path, hold_last_s=hold), reconfig=MODEL, policies=("static",)
        )
        results[hold] = replay(planner, request)
    per_second = {
        h: r.summaries[0].samples / h for h, r in results.items()
    }  # both start with the same downtime; over the long horizon it vanishes
    save = MODEL.save_s(JOB)
    steady = results[short].events[0].samples_per_s * 1000.0 / (1000.0 + save)
    assert per_second[long_] == pytest.approx(steady, rel=1e-6)
    segments = results[long_].timeline("static")
    assert len(segments) < 20
    trained = sum(s.samples_per_s * (s.end_s - s.start_s) for s in segments)
    assert results[long_].summaries[0].samples == pytest.approx(trained)


def test_a_replay_where_no_plan_fits_any_state_says_so(tmp_path) -> None:
    """--min-throughput 1000 (or a model no state's GPUs hold) printed a table of zeros, exit
    0, nothing said; plan on the same GPUs says why. Now one warning line on stderr; a replay
    that trains stays quiet."""
    path = trace_file(tmp_path, [f"0,{A100},8,,", f"1800,{A100},4,,", f"3600,{A100},8,,"])
    args = ["replay", "--trace", str(path), "--model", "OPT-350M", "--gbs", "64"]
    args += ["--plan-s", "1", "--policies", "sailor,static", "--json"]
    out = CliRunner().invoke(app, [*args, "--min-throughput", "1000"])
    assert out.exit_code == 0, out.output
    assert all(p["samples"] == 0 for p in json.loads(out.stdout)["policies"])
    assert out.stderr.splitlines() == [
        "warning: no policy trained: no plan of OPT-350M fits and meets the constraints on the "
        "GPUs of any state of trace t.csv; relax --min-throughput or replay a trace with more "
        "GPUs"
    ]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0 and out.stderr == "", out.output


def test_the_policy_table_keeps_four_significant_digits_of_a_small_cost(tmp_path) -> None:
    """tiny-llama's $/1M tokens printed 0.003 and 0.005 (one digit; below 0.0005 it is 0.000)."""
    path = trace_file(tmp_path, [f"0,{A100},8,,", f"3600,{A100},4,,", f"7200,{A100},8,,"])
    args = ["replay", "--trace", str(path), "--model", "tiny-llama", "--gbs", "16"]
    out = CliRunner().invoke(app, [*args, "--plan-s", "1", "--policies", "sailor,static"])
    assert out.exit_code == 0, out.output
    rows = [line.split() for line in out.stdout.splitlines()[1:3]]
    per_m = [row[3] for row in rows]  # policy, samples, $, $/1M tok
    assert all(len(f.lstrip("0.")) == 4 for f in per_m), out.stdout


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ("timestamp,zone,gpu_type,available,available\n0,us-central1-a,A100-40,8,3\n", "available"),
        (",Timestamp,A100-40_us-central1-a,A100-40_us-central1-a\n0,0,8,8\n1,100,4,4\n",
         "A100-40_us-central1-a"),
    ],
)  # fmt: skip
def test_a_column_the_header_repeats_is_named(tmp_path, text, column) -> None:
    """polars renamed the second copy NAME_duplicated_0: 'unknown column(s)
    available_duplicated_0', and in the original format 'row 0, column zone: unknown zone
    'us-central1-a_duplicated_0''."""
    path = tmp_path / "dup.csv"
    path.write_text(text)
    out = CliRunner().invoke(app, ["replay", "--trace", str(path), "--model", "OPT-350M"])
    assert out.exit_code == 2, out.output
    assert out.stderr == (
        f"error: dup.csv header: column '{column}' appears twice; keep one column of each name\n"
    )


@pytest.mark.parametrize(
    "text",
    [
        "timestamp,zone,gpu_type,available\n0,us-central1-a,A100-40,8\n"
        "2026-01-01T00:00:00,us-central1-a,A100-40,4\n",
        ",Timestamp,A100-40_us-central1-a\n0,2026-01-01T00:00:00,8\n1,3600,4\n",
    ],
    ids=["long", "sailor"],
)
def test_a_trace_mixing_seconds_and_dates_is_refused(tmp_path, text) -> None:
    """Seconds from 0 then a date: one state of 56 years was replayed (51e9 samples)."""
    path = tmp_path / "mixed.csv"
    path.write_text(text)
    out = CliRunner().invoke(app, ["replay", "--trace", str(path), "--model", "OPT-350M"])
    assert out.exit_code == 2, out.output
    line = out.stderr.strip()
    assert line.count("\n") == 0 and "mixed.csv row 2" in line
    assert "write every timestamp one way" in line


@pytest.mark.parametrize("policies", ["sailor,,static", "sailor,", ""])
def test_an_empty_policy_name_is_refused(tmp_path, policies) -> None:
    """'a,,b' ran a and b without a word, '' said 'unknown policy (none)'."""
    path = tmp_path / "t.csv"
    path.write_text(
        "timestamp,zone,gpu_type,available\n0,us-central1-a,A100-40,8\n3600,us-central1-a,A100-40,4\n"
    )
    args = ["replay", "--trace", str(path), "--model", "OPT-350M", "--policies", policies]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 2, out.output
    assert out.stderr.startswith(f"error: policies: {policies!r} has an empty name")
