"""The resolver (``checks.calls.spec``): what the user wrote becomes one typed spec — a function or a
framework, its level defaulted (the gradient for a framework's trainer path, the advantages
otherwise), its release picked when the framework is not installed here — and every bad
combination of options is an ``OptionError`` naming the option."""

from __future__ import annotations

import pytest

from grpo_identity.app.cli import main
from grpo_identity.checks.calls import releases as R
from grpo_identity.checks.calls.adapters import TESTED_VERSIONS
from grpo_identity.checks.calls.calling import CallOptions
from grpo_identity.checks.calls.spec import FunctionSpec, resolve
from grpo_identity.checks.calls.target import TargetImportError
from grpo_identity.checks.frameworks import AdapterError, FrameworkSpec, is_framework
from grpo_identity.checks.options import OptionError


def grpo_like(rewards, G):
    return rewards


def test_the_python_api_and_the_cli_default_a_framework_target_to_the_gradient():
    assert resolve("trl").level == "gradient" and resolve("verl:grpo").level == "gradient"
    assert resolve("verl:estimator=grpo_vectorized").level == "advantage"  # no loss to differentiate
    assert (
        resolve(FrameworkSpec("trl", level="advantage")).level == "advantage" and resolve("grpo").level == "advantage"
    )


def test_a_function_target_is_a_function_spec_at_the_level_asked_for(tmp_path):
    path = tmp_path / "loss.py"
    path.write_text("def fn(rewards, G, lengths=None):\n    return rewards\n")
    spec = resolve(f"{path}:fn", level="gradient")
    assert isinstance(spec, FunctionSpec) and spec.level == "gradient" and spec.describe() == f"{path}:fn"
    assert not spec.builtin and resolve("grpo").builtin and resolve("preset:trl").builtin
    assert resolve(grpo_like, kind="filter") == FunctionSpec(grpo_like, "filter", "advantage", CallOptions())
    assert spec.calling is None  # the gradient level's contract is fixed: fn(rewards, G, lengths)
    assert resolve(grpo_like).describe() == "grpo_like"
    assert is_framework("VERL:grpo") and is_framework(FrameworkSpec("trl")) and not is_framework("preset:trl")


def test_a_framework_spec_takes_the_sets_in_order_and_its_short_form_first():
    spec = resolve("verl:grpo", sets=["algorithm.gamma=0.5", ("algorithm.gamma", "1")], level="advantage")
    assert spec.sets == (("algorithm.adv_estimator", "grpo"), ("algorithm.gamma", "0.5"), ("algorithm.gamma", "1"))
    assert spec.level == "advantage" and spec.release is None and not spec.release_auto  # verl is installed here


def test_a_framework_not_installed_here_resolves_to_its_tested_release():
    spec = resolve("areal")  # AReaL never goes into the project's environment
    assert (spec.release, spec.release_auto) == (TESTED_VERSIONS["areal"], True)
    chosen = resolve("areal", release="1.0.3")
    assert (chosen.release, chosen.release_auto) == ("1.0.3", False)


@pytest.mark.parametrize(
    "target, options, field, words",
    [
        (
            "grpo",
            {"sets": ["loss_type=grpo"]},
            "sets",
            "applies to the framework targets (trl, verl, areal, openrlhf, skyrl, ms-swift)",
        ),
        ("grpo", {"config": "run.yaml"}, "config", "applies to the framework targets"),
        ("grpo", {"release": "1.0"}, "release", "applies to the framework targets"),
        ("grpo", {"level": "gradient"}, "level", "gradient: the preset 'grpo' has no loss"),
        ("preset:trl", {"level": "gradient"}, "level", "gradient: the preset 'preset:trl' has no loss"),
        (grpo_like, {"kind": "filter", "level": "gradient"}, "level", "gradient: a filter has no loss"),
        ("grpo", {"kind": "filters"}, "kind", "must be one of advantage, filter"),
        ("grpo", {"level": "loss"}, "level", "must be one of advantage, gradient"),
        (42, {}, "target", "must be a function, a spec string or a framework"),
        ("trl", {"sets": ["loss_type"]}, "sets", "takes KEY=VALUE, got 'loss_type'"),
        ("trl", {"config": "no/such/file.yaml"}, "config", "names no file: no/such/file.yaml"),
        ("trl", {"kind": "filter"}, "kind", "only presets and functions can be audited as filters"),
        ("verl", {"release": "0.6; rm"}, "release", "must be a version number"),
        ("verl:grpo:rloo", {}, "target", "is no KEY=VALUE option"),
        ("verl:estimator=grpo", {"sets": ["algorithm.gamma=1"]}, "sets", "the estimator function alone"),
        ("verl:estimator=grpo", {"level": "gradient"}, "level", "the estimator function alone, it has no loss"),
    ],
)
def test_a_bad_combination_is_an_option_error_naming_the_option(target, options, field, words):
    with pytest.raises(OptionError) as info:
        resolve(target, **options)
    assert info.value.field == field and words in info.value.problem, str(info.value)
    assert isinstance(info.value, ValueError)


def test_an_option_error_is_worded_as_each_front_end_names_the_option():
    error = OptionError("max_examples", "must be an integer from 1 to 10,000, got 0")
    assert (
        error.worded({"max_examples": "--max-examples"}) == "--max-examples must be an integer from 1 to 10,000, got 0"
    )
    assert error.worded({}) == str(error) == "max_examples must be an integer from 1 to 10,000, got 0"


def test_a_target_string_that_names_no_target_is_an_import_error_at_once():
    with pytest.raises(TargetImportError, match="no such file: nope/missing.py"):
        resolve("nope/missing.py:fn")
    with pytest.raises(TargetImportError, match="neither FILE.py:FUNCTION, MODULE:FUNCTION nor an adapter"):
        resolve("justaname")


def test_a_framework_not_installed_here_is_audited_in_its_tested_release_environment(monkeypatch, capsys):
    import importlib.util as iu

    real = iu.find_spec
    monkeypatch.setattr(iu, "find_spec", lambda name, *a: None if name == "trl" else real(name, *a))
    asked = []

    def no_pip_here(framework, release, **kw):
        asked.append((framework, release))
        raise AdapterError("pip could not install trl here: no network")

    monkeypatch.setattr(R, "ensure", no_pip_here)
    assert main(["audit", "trl", "--set", "loss_type=grpo"]) == 2
    err = capsys.readouterr().err
    assert asked == [("trl", TESTED_VERSIONS["trl"])]
    assert (
        "trl is not installed here: auditing its release" in err
        and f"trl {TESTED_VERSIONS['trl']} (its tested release; it is not installed here): pip could not install" in err
        and "--release 1" not in err
    )
