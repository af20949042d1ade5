"""The training recipe: schedules, weight-decay groups, the TOML file and its errors."""

from __future__ import annotations

import math

import pytest

from sailor_sim.errors import SailorError
from sailor_sim.spec.recipe import NO_DECAY_GROUPS, LRSchedule, OptimConfig, Recipe


def test_schedules_warm_up_then_decay_to_min_lr():
    for kind in ("cosine", "linear", "wsd"):
        s = LRSchedule(max_lr=1.0, min_lr=0.1, warmup_steps=10, decay_steps=110, kind=kind)
        assert [s.lr(i) for i in (0, 4, 9)] == [0.1, 0.5, 1.0]
        assert s.lr(110) == s.lr(500) == 0.1
        lrs = [s.lr(i) for i in range(10, 111)]
        assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False)), kind
    cosine = LRSchedule(max_lr=1.0, min_lr=0.0, warmup_steps=0, decay_steps=100)
    assert cosine.lr(50) == pytest.approx(0.5) and cosine.lr(25) == pytest.approx(
        0.5 * (1 + math.cos(math.pi / 4))
    )
    linear = LRSchedule(max_lr=1.0, min_lr=0.0, warmup_steps=0, decay_steps=100, kind="linear")
    assert linear.lr(25) == pytest.approx(0.75)
    # WSD: stable at the peak until the last 20 % of decay_steps, then linear to min_lr.
    wsd = LRSchedule(max_lr=1.0, min_lr=0.0, warmup_steps=0, decay_steps=100, kind="wsd")
    assert wsd.lr(79) == 1.0 and wsd.lr(90) == pytest.approx(0.5)
    const = LRSchedule(max_lr=2.0, warmup_steps=0, kind="constant")
    assert const.lr(5000) == 2.0


def test_recipe_defaults_exempt_norms_biases_embeddings():
    assert Recipe().optim().no_decay == NO_DECAY_GROUPS
    assert OptimConfig().no_decay == ()  # the engine's bare default: everything decays


def test_a_recipe_gives_the_engine_its_schedule_and_optimizer():
    r = Recipe(lr=6e-4, min_lr=6e-5, warmup_steps=100, schedule="wsd", weight_decay=0.05,
               no_decay="norm,bias", clip_norm=0.5, beta1=0.8, beta2=0.99)  # fmt: skip
    assert r.schedule_for(1000) == LRSchedule(6e-4, 6e-5, 100, 1000, "wsd")
    assert r.optim() == OptimConfig((0.8, 0.99), 1e-8, 0.05, 0.5, ("norm", "bias"))
    assert Recipe(decay_steps=50).schedule_for(1000).decay_steps == 50


@pytest.mark.parametrize(
    "values, message",
    [
        ({"schedule": "step"}, "schedule: must be one of"),
        ({"no_decay": "norms"}, "no_decay: must be a subset of"),
        ({"beta2": 1.5}, "beta1/beta2: must be two numbers in [0, 1)"),
        ({"clip_norm": -1.0}, "clip_norm: must be >= 0"),
        ({"lr": 0.0}, "lr: must be > 0"),
        ({"min_lr": 1.0}, "min_lr: must be in [0, max_lr]"),  # above the default lr
        ({"lr": 1e-4, "min_lr": 1e-3}, "min_lr: must be in [0, max_lr]"),
        ({"eps": math.inf}, "eps: must be > 0 and finite"),
        ({"weight_decay": math.inf}, "weight_decay: must be >= 0 and finite"),
    ],
)
def test_bad_recipe_values_name_the_field(values, message):
    with pytest.raises(SailorError) as exc:
        Recipe(**values)
    assert message in str(exc.value)


def test_min_lr_defaults_to_a_tenth_of_lr_and_survives_the_wire():
    from sailor_sim import RunSpec

    assert Recipe(lr=1e-5).schedule_for(10).min_lr == pytest.approx(1e-6)  # not the 1e-4 default
    assert Recipe(lr=1e-3, min_lr=0.0).schedule_for(10).min_lr == 0.0  # an explicit 0 stays
    for recipe in (Recipe(lr=2e-3), Recipe(lr=2e-3, min_lr=0.0)):
        back = RunSpec.from_proto(RunSpec(recipe=recipe).to_proto()).recipe
        assert back.min_lr == recipe.min_lr


def test_an_engine_shaped_schedule_and_optimizer_write_back_into_the_recipe():
    """``with_engine`` is the inverse of ``schedule_for`` / ``optim``: what a config built
    from LRSchedule / OptimConfig values holds in its recipe gives them back exactly."""
    schedule = LRSchedule(max_lr=0.02, min_lr=0.0, warmup_steps=5, decay_steps=77, kind="wsd",
                          wsd_decay_fraction=0.3)  # fmt: skip
    optim = OptimConfig(betas=(0.8, 0.99), eps=1e-6, weight_decay=0.0, clip_norm=0.5,
                        no_decay=("bias", "norm"))  # fmt: skip
    recipe = Recipe().with_engine(schedule, optim)
    assert recipe.schedule_for(123) == schedule and recipe.optim() == optim
    assert Recipe().with_engine(optim=OptimConfig()).optim() == OptimConfig()
    assert Recipe(lr=0.5).with_engine(optim=OptimConfig()).lr == 0.5  # the schedule kept
