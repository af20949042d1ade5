"""One flag vocabulary (issue 23): every CLI that takes a job or a run takes RunSpec's fields as
flags, spelled the same, declared once. A command that declares its own spelling of a RunSpec
setting, or drops one, fails here."""

from __future__ import annotations

import pytest
import typer

from sailor_sim import TRAINING_FIELDS, RunSpec, specs


def _options(app: typer.Typer, command: str) -> dict[str, str]:
    """Each option spelling of ``command`` -> the name of the parameter it sets."""
    group = typer.main.get_command(app)
    params = group.commands[command].params
    return {opt: p.name for p in params for opt in (*p.opts, *p.secondary_opts)}


def _commands():
    from sailor_planner.cli import app as planner
    from sailor_runtime.cli import app as runtime
    from sailor_sim.cli.app import app as sim

    prediction = {*TRAINING_FIELDS}
    return [
        ("sailor run", runtime, "run", set()),
        ("sailor controller", runtime, "controller", set()),
        ("sailor-sim simulate", sim, "simulate", prediction),
        ("sailor-sim memory", sim, "memory", prediction | {"global_batch_size"}),
        ("sailor-planner plan", planner, "plan", prediction | {"optimizer"}),
        ("sailor-planner replay", planner, "replay", prediction | {"optimizer"}),
    ]


@pytest.mark.parametrize("name, app, command, excluded", _commands())
def test_every_cli_takes_runspec_fields_as_the_same_flags(name, app, command, excluded):
    options = _options(app, command)
    for flag in specs.flags(RunSpec):
        spelled = flag.option
        if flag.name in excluded:
            assert spelled not in options, f"{name} takes {spelled}, which it does not use"
            continue
        assert spelled in options, f"{name} lacks {spelled}"
        # generated from the field (specs.with_spec), not declared by hand in the command
        assert options[spelled] == "_".join(flag.path), (name, spelled, options[spelled])
        for alias in specs.ALIASES.get(flag.name, ()):
            assert options[alias.split("/")[0]] == "_".join(flag.path), (name, alias)
    assert options.get("--config") == "config"
