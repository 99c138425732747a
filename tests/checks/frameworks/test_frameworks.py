"""Framework specs (``checks.frameworks``): the short forms parsed into each framework's own keys
(TRL, verl, AReaL, OpenRLHF), ``--set`` pairs kept in order with their raw text, and malformed
short forms refused."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity.checks.frameworks import (
    AdapterError,
    FrameworkSpec,
    hydra_keys,
    parse_set,
    parse_spec,
    whole_number,
)


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


@pytest.mark.parametrize(
    "raw, least, most, text, value",
    [
        ("3", 1, None, True, 3),
        (" +3 ", 1, None, True, 3),
        ("1_024", 1, None, True, 1024),
        (7, 2, 8, False, 7),
        (2, 2, 2, True, 2),
        (np.int64(4), 1, None, False, 4),
    ],  # fmt: skip
)
def test_a_whole_number_in_bounds_is_its_value(raw, least, most, text, value):
    assert whole_number(raw, "k", least=least, most=most, text=text) == value


@pytest.mark.parametrize(
    "raw, least, most, text, message",
    [
        ("0", 1, None, True, "SkyRL 0.3.0: k takes a whole number ≥ 1, got '0': set k=1"),
        ("1", 2, None, True, "SkyRL 0.3.0: k takes a whole number ≥ 2, got '1': set k=2"),
        ("5", 1, 4, True, "SkyRL 0.3.0: k takes a whole number from 1 to 4, got '5': set k=4"),
        ("-1", 1, 4, True, "SkyRL 0.3.0: k takes a whole number from 1 to 4, got '-1': set k=1"),
        ("1.5", 1, None, True, "SkyRL 0.3.0: k takes a whole number ≥ 1, got '1.5': set k=1"),
        ("abc", 1, None, True, "SkyRL 0.3.0: k takes a whole number ≥ 1, got 'abc': set k=1"),
        (True, 1, None, True, "SkyRL 0.3.0: k takes a whole number ≥ 1, got True: set k=1"),
        (None, 1, None, True, "SkyRL 0.3.0: k takes a whole number ≥ 1, got None: set k=1"),
        (2.0, 1, None, True, "SkyRL 0.3.0: k takes a whole number ≥ 1, got 2.0: set k=1"),
        ("4", 1, None, False, "SkyRL 0.3.0: k takes a whole number ≥ 1, got '4': set k=1"),  # text in a typed config
        ("+-4", 1, None, True, "SkyRL 0.3.0: k takes a whole number ≥ 1, got '+-4': set k=1"),
        ("²", 1, None, True, "SkyRL 0.3.0: k takes a whole number ≥ 1, got '²': set k=1"),
        ("1__0", 1, None, True, "SkyRL 0.3.0: k takes a whole number ≥ 1, got '1__0': set k=1"),
        ("9" * 5000, 1, 4, True, f"SkyRL 0.3.0: k takes a whole number from 1 to 4, got '{'9' * 5000}': set k=1"),
    ],
)
def test_a_setting_that_is_no_whole_number_in_bounds_is_refused_naming_it_and_a_value_that_runs(
    raw, least, most, text, message
):
    with pytest.raises(AdapterError) as caught:
        whole_number(raw, "k", least=least, most=most, who="SkyRL 0.3.0", text=text)
    assert str(caught.value) == message


def test_the_keys_a_hydra_framework_was_given_are_the_sets_without_prefixes_and_every_key_of_the_file(tmp_path):
    sets = (("+actor.ppo_n_minibatches", "2"), ("~trainer.logger", "null"), ("data.train_batch_size", "4"))
    given = {"actor.ppo_n_minibatches", "trainer.logger", "data.train_batch_size"}
    assert hydra_keys(FrameworkSpec("verl", sets=sets)) == given
    pytest.importorskip("omegaconf")
    path = tmp_path / "run.yaml"
    path.write_text("actor:\n  mb_spec:\n    max_tokens_per_mb: 4096\n  empty: {}\ngconfig: {n_samples: 8}\n")
    assert hydra_keys(FrameworkSpec("areal", sets=sets, config=str(path))) == given | {
        "actor", "actor.mb_spec", "actor.mb_spec.max_tokens_per_mb", "actor.empty", "gconfig", "gconfig.n_samples",
    }  # fmt: skip
