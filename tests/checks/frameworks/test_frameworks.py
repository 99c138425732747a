"""Framework specs (``checks.frameworks``): the short forms parsed into each framework's own keys
(TRL, verl, AReaL, OpenRLHF), ``--set`` pairs kept in order with their raw text, and malformed
short forms refused."""

from __future__ import annotations

import pytest

from grpo_identity.checks.frameworks import AdapterError, FrameworkSpec, parse_set, parse_spec


def test_the_short_forms_parse_into_the_frameworks_own_keys():
    assert parse_spec("trl:scale_rewards=none,loss_type=dr_grpo").sets == (
        ("scale_rewards", "none"),
        ("loss_type", "dr_grpo"),
    )
    assert parse_spec("verl:rloo").sets == (("algorithm.adv_estimator", "rloo"),)
    bypass = parse_spec("verl:estimator=grpo_vectorized,epsilon=1e-6")
    assert bypass.estimator == "grpo_vectorized" and bypass.options == (("epsilon", 1e-6),) and bypass.sets == ()
    assert bypass.describe() == "verl:estimator=grpo_vectorized,epsilon=1e-06"


def test_the_areal_short_form_keeps_its_dotted_keys_and_their_raw_values():
    spec = parse_spec("areal:actor.reward_norm.mean_level=group,actor.reward_norm.std_level=null")
    assert spec.framework == "areal" and spec.sets == (
        ("actor.reward_norm.mean_level", "group"),
        ("actor.reward_norm.std_level", "null"),
    )
    assert spec.describe() == "areal --set actor.reward_norm.mean_level=group --set actor.reward_norm.std_level=null"
    with pytest.raises(AdapterError, match="no KEY=VALUE"):
        parse_spec("areal:grpo")


def test_the_openrlhf_short_form_sets_train_ppo_rays_own_option_names():
    spec = parse_spec("openrlhf:group_norm:algo.advantage.no_std_norm=true")
    assert spec.framework == "openrlhf" and spec.sets == (
        ("algo.advantage.estimator", "group_norm"),
        ("algo.advantage.no_std_norm", "true"),
    )
    assert spec.describe() == "openrlhf --set algo.advantage.estimator=group_norm --set algo.advantage.no_std_norm=true"


def test_later_sets_come_after_earlier_ones_and_keep_their_raw_text():
    spec = FrameworkSpec("trl", sets=(("beta", "0.0"),)).with_sets([parse_set("beta=0.04")], level="gradient")
    assert spec.sets == (("beta", "0.0"), ("beta", "0.04")) and spec.level == "gradient"
    assert spec.describe() == "trl --set beta=0.0 --set beta=0.04"


@pytest.mark.parametrize("spec", ["trl:grpo", "verl:grpo:rloo", "openrlhf:group_norm:rloo", "nemo:x=1"])
def test_malformed_short_forms_are_adapter_errors(spec):
    with pytest.raises(AdapterError):
        parse_spec(spec)
