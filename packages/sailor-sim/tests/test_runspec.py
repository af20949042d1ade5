"""RunSpec is the one declaration of a run setting: flags, config files, dicts and the wire
message all come from its fields."""

from __future__ import annotations

import dataclasses
import re
import typing

import pytest
import typer
from typer.testing import CliRunner

from sailor_sim import ExecutionOptions, Recipe, RunSpec, ValidationError
from sailor_sim.proto import job_pb2
from sailor_sim.spec import derive as specs


def _command(cls=RunSpec):
    app = typer.Typer()
    seen = {}

    @app.command()
    @specs.with_spec(cls)
    def run(spec, dry: bool = typer.Option(False, "--dry")) -> None:
        seen["spec"], seen["dry"] = spec, dry

    @app.callback()
    def group() -> None:
        pass

    return app, seen


def _invoke(argv, cls=RunSpec):
    app, seen = _command(cls)
    result = CliRunner().invoke(app, ["run", *argv])
    return result, seen.get("spec")


def test_every_field_is_a_flag_with_its_docstring_as_help() -> None:
    leaves = specs.flags(RunSpec)
    names = {f.name for f in leaves}
    option_fields = {f.name for f in dataclasses.fields(ExecutionOptions)}
    recipe_fields = {f.name for f in dataclasses.fields(Recipe)}
    run_fields = {f.name for f in dataclasses.fields(RunSpec)} - {"options", "recipe"}
    assert names == run_fields | option_fields | recipe_fields
    assert all(f.help for f in leaves), [f.name for f in leaves if not f.help]


def test_flags_build_the_spec_and_the_defaults_are_the_fields() -> None:
    result, spec = _invoke([])
    assert result.exit_code == 0, result.output
    assert spec == RunSpec()
    argv = ["--model", "tiny-gpt", "--gbs", "32", "--seq-len", "64", "--dtype", "bf16",
            "--zero", "zero1", "--no-flash", "--steps", "7", "--seed", "3"]  # fmt: skip
    result, spec = _invoke(argv)
    assert result.exit_code == 0, result.output
    assert spec == RunSpec(
        model="tiny-gpt", global_batch_size=32, seq_len=64, precision="bf16", steps=7, seed=3,
        options=ExecutionOptions(zero="zero1", flash_attention=False),
    )  # fmt: skip


def test_a_config_file_is_the_base_and_flags_override_it(tmp_path) -> None:
    config = tmp_path / "run.toml"
    config.write_text('model = "tiny-gpt"\nsteps = 50\n[options]\nrecompute = "full"\n')
    result, spec = _invoke(["--config", str(config), "--steps", "9"])
    assert result.exit_code == 0, result.output
    assert (spec.model, spec.steps, spec.options.recompute) == ("tiny-gpt", 9, "full")


@pytest.mark.parametrize(
    "content, problem",
    [
        ("stepz = 3\n", "unknown field(s) ['stepz']"),
        ('steps = "many"\n', "run.toml.steps: must be int"),
        ("[options]\nzero = 3\n", "run.toml.options.zero: must be str"),
        ("steps = [\n", "not valid TOML"),
    ],
)
def test_a_bad_config_file_names_the_problem(tmp_path, content, problem) -> None:
    config = tmp_path / "run.toml"
    config.write_text(content)
    with pytest.raises(ValidationError, match=re.escape(problem)):
        specs.from_file(RunSpec, config)


@pytest.mark.parametrize(
    "field, value",
    [("steps", 0), ("seed", -1), ("seed", 2**32), ("global_batch_size", 0),
     ("checkpoint_every", -1), ("precision", "fp7"), ("optimizer", "lion"), ("model", " ")],
)  # fmt: skip
def test_bad_values_are_refused_naming_the_field(field, value) -> None:
    with pytest.raises(ValidationError, match=field):
        RunSpec(**{field: value})


def _proto_fields(message) -> set[str]:
    return {f.name for f in message.DESCRIPTOR.fields}


def test_the_wire_message_has_exactly_the_spec_fields_and_round_trips() -> None:
    assert _proto_fields(job_pb2.RunSpec()) == {f.name for f in dataclasses.fields(RunSpec)} | {
        specs.EXTENSIONS
    }
    assert _proto_fields(job_pb2.Recipe()) == {f.name for f in dataclasses.fields(Recipe)}
    assert _proto_fields(job_pb2.ExecutionOptions()) == {
        f.name for f in dataclasses.fields(ExecutionOptions)
    }
    for spec in (
        RunSpec(),
        RunSpec(
            model="tiny-gpt",
            seq_len=64,
            precision="bf16",
            seed=2**32 - 1,
            options=ExecutionOptions(zero="zero3", flash_attention=True),
            recipe=Recipe(lr=3e-3, decay_steps=40, no_decay="", schedule="wsd"),
        ),  # fmt: skip
    ):
        wire = job_pb2.RunSpec.FromString(spec.to_proto().SerializeToString())
        assert RunSpec.from_proto(wire) == spec
        assert RunSpec.from_dict(spec.to_dict()) == spec


def test_a_field_added_to_the_spec_is_a_flag_and_travels_with_no_other_declaration() -> None:
    # A new knob, declared once (its field and docstring), is at once a CLI flag, a config
    # key and part of the spec's plain data.
    Extended = dataclasses.make_dataclass(
        "Extended",
        [("grad_noise", float, dataclasses.field(default=0.0))],
        bases=(RunSpec,),
        frozen=True,
    )
    Extended.__module__ = __name__
    assert "grad_noise" in {f.name for f in specs.flags(Extended)}
    result, spec = _invoke(["--grad-noise", "0.5", "--steps", "3"], cls=Extended)
    assert result.exit_code == 0, result.output
    assert (spec.grad_noise, spec.steps) == (0.5, 3)
    assert specs.from_dict(Extended, specs.to_dict(spec)) == spec
    assert typing.get_type_hints(Extended)["grad_noise"] is float
    # On the wire it rides in `extensions`; a receiver that knows only RunSpec gets it back.
    wire = job_pb2.RunSpec.FromString(spec.to_proto().SerializeToString())
    received = RunSpec.from_proto(wire)
    assert isinstance(received, RunSpec) and received.grad_noise == 0.5 and received.steps == 3
    assert specs.to_dict(received) == specs.to_dict(spec)
    assert specs.from_json(RunSpec, specs.to_json(spec, job_pb2.RunSpec()), job_pb2.RunSpec())
    assert Extended.from_proto(wire) == spec


def test_a_command_has_its_own_defaults_below_the_file_and_the_flags(tmp_path) -> None:
    app = typer.Typer()
    seen = {}

    @app.command()
    @specs.with_spec(RunSpec, defaults={"model": "tiny-gpt", "steps": 20, "lr": 3e-3})
    def run(spec) -> None:
        seen["spec"] = spec

    @app.callback()
    def group() -> None:
        pass

    config = tmp_path / "run.toml"
    config.write_text("steps = 7\n[recipe]\nwarmup_steps = 4\n")
    result = CliRunner().invoke(app, ["run", "--config", str(config), "--seed", "5"])
    assert result.exit_code == 0, result.output
    spec = seen["spec"]
    assert (spec.model, spec.steps, spec.seed) == ("tiny-gpt", 7, 5)
    assert (spec.recipe.lr, spec.recipe.warmup_steps) == (3e-3, 4)
    assert spec.lr_schedule().decay_steps == 7  # the decay ends with the run


def test_a_bad_recipe_value_names_its_flag() -> None:
    with pytest.raises(ValidationError, match="no_decay: must be a subset"):
        Recipe(no_decay="norm,weights")
    with pytest.raises(ValidationError, match="schedule: must be one of"):
        Recipe(schedule="step")
    with pytest.raises(ValidationError, match="beta1/beta2"):
        Recipe(beta2=1.5)


@pytest.mark.parametrize(
    "name, text",
    [("grad noise", "1"), ("class", "1"), ("_x", "1"), ("x", "[1]"), ("x", "{"), ("steps", '"7"')],
)
def test_a_bad_extension_on_the_wire_is_refused_naming_it(name, text) -> None:
    wire = RunSpec().to_proto()
    wire.extensions[name] = text
    with pytest.raises(ValidationError):
        RunSpec.from_proto(wire)
