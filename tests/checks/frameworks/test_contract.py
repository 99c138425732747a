"""The driver contract (grpo_identity.checks.frameworks.contract): every registered driver keeps it, and a built
target's calls reach the method the call asks for."""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from grpo_identity.checks.frameworks import AdapterError, FrameworkSpec
from grpo_identity.checks.frameworks.contract import (
    LEVELS,
    RANKS,
    Built,
    Difference,
    Driver,
    DriverInfo,
    DriverSettings,
    StepPlan,
)
from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE

DRIVERS = Path(__file__).resolve().parents[3] / "checks" / "frameworks"


@pytest.mark.parametrize("name", list(FRAMEWORK_TABLE))
def test_every_registered_driver_module_keeps_the_contract(name):
    module = importlib.import_module(FRAMEWORK_TABLE[name].driver)  # without its framework: imported only to build
    assert isinstance(module, Driver)
    assert list(inspect.signature(module.build).parameters) == ["spec", "level"]
    assert set(FRAMEWORK_TABLE[name].settings) <= {"per_sample_weight", "preset", "split"}
    assert not hasattr(module, "SETTINGS")  # the registry row holds them: one place per framework
    assert not inspect.signature(module.import_check).parameters


@pytest.mark.parametrize("name", list(FRAMEWORK_TABLE))
def test_no_driver_hands_out_a_bare_function_with_its_info_pinned_on(name):
    """A driver's targets are Built subclasses: no closure carries a hand-written ``grpo_identity_info`` dict, and
    no driver tells calls apart by ``lengths is None`` (the contract's one dispatch does)."""
    tree = ast.parse((DRIVERS / f"{name.replace('-', '_')}.py").read_text())
    pinned = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == "grpo_identity_info" for t in n.targets)
    ]
    told_apart = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Compare)
        and isinstance(n.left, ast.Name)
        and n.left.id in ("lengths", "request")
        and any(isinstance(c, ast.Constant) and c.value is None for c in n.comparators)
    ]
    assert (pinned, told_apart) == ([], [])


#: a step of 8 answers in generation batches of 16, G = 4
PLAN = StepPlan(4, 8, 16, "two", "one")


class _Recorder(Built):
    """Every method records what reached it."""

    def __init__(self, level: str, components: dict | None = None) -> None:
        super().__init__(DriverInfo("demo", "1.0", "records", step=PLAN, components=components), level)
        self.seen: list[tuple] = []

    def advantages(self, rewards, G, scores=None):
        self.seen.append(("advantages", G, None if scores is None else np.asarray(scores).shape))
        return np.zeros(len(rewards))

    def gradient(self, rewards, G, lengths):
        self.seen.append(("gradient", G, tuple(lengths)))
        return {"advantages": np.zeros(len(rewards))}

    def step(self, rewards, G, lengths, request):
        self.seen.append(("step", G, request["layout"]))
        return {}

    def off_policy(self, rewards, G, lengths, settings):
        self.seen.append(("off_policy", G, settings["seed"]))
        return {}


def test_each_call_form_reaches_its_method():
    r, L = np.array([1.0, 0.0, 1.0, 1.0]), np.array([1, 2, 3, 4])
    grad = _Recorder("gradient", components={"weights": [1.0, 1.0, 1.0]})
    grad(r, 2)
    grad(r, 2, None)
    grad(r, 2, L)
    grad(r, 2, L, {"layout": "split", "sizes": [2, 2]})
    grad(r, 2, L, {"off_policy": {"seed": 7, "scale": 0.1}})
    grad(r, 2, None, {"scores": np.ones((4, 3))})
    assert grad.seen == [
        ("advantages", 2, None),
        ("advantages", 2, None),
        ("gradient", 2, (1, 2, 3, 4)),
        ("step", 2, "split"),
        ("off_policy", 2, 7),
        ("advantages", 2, (4, 3)),
    ]
    adv = _Recorder("advantage", components={"weights": [1.0, 1.0]})
    adv(r, 2, np.ones((4, 2)))  # the advantage level's third argument: one column per reward function
    assert adv.seen == [("advantages", 2, (4, 2))]


def test_arguments_a_target_cannot_take_are_refused_not_dropped():
    r = np.ones(4)
    with pytest.raises(TypeError, match="scores one reward, not reward columns"):
        _Recorder("advantage")(r, 2, np.ones((4, 2)))  # its info names no reward components
    with pytest.raises(TypeError, match="scores one reward, not reward columns"):
        _Recorder("gradient")(r, 2, None, {"scores": np.ones((4, 2))})
    with pytest.raises(TypeError, match="at most scores; got 4"):
        _Recorder("advantage", components={"weights": [1.0]})(r, 2, np.ones((4, 1)), "more")
    with pytest.raises(ValueError, match="level must be one of advantage, gradient, got 'step'"):
        _Recorder("step")


def test_a_step_request_without_lengths_and_a_question_the_target_does_not_answer_are_refused():
    with pytest.raises(ValueError, match="a step request needs the answers' lengths"):
        _Recorder("gradient")(np.ones(2), 2, None, {"layout": "split"})
    plain = Built(DriverInfo("demo", "1.0", "nothing"), "advantage")
    with pytest.raises(NotImplementedError, match="demo: this target runs no optimizer step"):
        plain.step(np.ones(2), 2, np.ones(2), {"layout": "split"})


def test_the_info_names_ranks_and_objective_from_the_step_and_drops_what_is_unset():
    info = DriverInfo(
        "demo",
        "1.0",
        "records",
        {"loss_type": "dapo"},
        DriverSettings(forced={"use_cpu": {"driver": True, "yours": None}}, defaults={"n": 4}, ignored=("x",)),
        details={"estimator": "grpo"},
        step=replace(PLAN, ranks=2, objective={"name": "token_mean"}),
    )
    d = info.to_dict()
    assert (d["version"], d["estimator"], d["ranks"], info.objective) == (
        "1.0",
        "grpo",
        "processes",
        {"name": "token_mean"},
    )
    assert d["step"]["ranks"] == "processes" and d["step"]["layouts"] == {"split": "two", "unsplit": "one"}
    assert d["driver_settings"] == {
        "forced": {"use_cpu": {"driver": True, "yours": None}},
        "defaults": {"n": 4},
        "ignored": ["x"],
        "note": "",
    }
    assert {"off_policy", "components", "step_unavailable", "lengths_optional"}.isdisjoint(d)
    assert DriverInfo("demo", "1.0", "e").to_dict()["ranks"] == "one"


@pytest.mark.frameworks
@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
def test_the_installed_drivers_build_targets_with_typed_info(level):
    """TRL and verl are in the lock: each builds a Built target per level whose info is a DriverInfo."""
    from grpo_identity.checks.calls import adapters

    specs = [FrameworkSpec("trl"), FrameworkSpec("verl", sets=(("algorithm.adv_estimator", "grpo"),))]
    for spec in specs:
        built = adapters.build(spec, level)
        assert isinstance(built, Built) and isinstance(built.driver_info, DriverInfo)
        d = built.grpo_identity_info
        assert (d["framework"], d["ranks"] in RANKS) == (spec.framework, True)
        assert isinstance(d["driver_settings"]["defaults"], dict)
        assert ("step" in d) == (level == "gradient")
        out = built(np.array([1.0, 0.0, 1.0, 1.0]), 2)  # GRPO: (r - mean) / std with Bessel's correction
        assert np.allclose(out, [2**-0.5, -(2**-0.5), 0.0, 0.0], atol=1e-4)


def test_a_step_plan_puts_what_the_driver_chose_for_the_step_beside_what_it_chose_for_the_per_g_probes():
    info = DriverInfo("demo", "1.0", "e", settings=DriverSettings(defaults={"micro": 3, "n": 2}))
    chosen = {"micro": 2, "batch": 8, "n": 2}  # n: the value the per-G probes set too, said once
    stepped = info.with_step(replace(PLAN, chosen=chosen), lengths_optional=True)
    assert stepped.settings.defaults == {"micro": "3 (the per-G probes), 2 (the step)", "n": 2, "batch": 8}
    own = info.with_step(replace(PLAN, chosen=chosen), settings=DriverSettings(note="mine"))  # changes, then plan
    assert own.settings.note == "mine" and own.settings.defaults == {"micro": 2, "batch": 8, "n": 2}
    assert stepped.step is not None and stepped.lengths_optional and info.step is None  # info itself unchanged
    assert stepped.to_dict()["step"]["group_size"] == 4 and stepped.ranks == "one"
    assert replace(info, step=replace(PLAN, ranks=2, emulated=True)).to_dict()["ranks"] == "emulated"
    exported = replace(PLAN, export={"release": "1.0"}).geometry()
    assert exported["export"] == {"release": "1.0"} and "export" not in PLAN.geometry()


# --- each driver's table of release differences ------------------------------------------------------
def _defined(site: Path, where: str) -> bool:
    """Whether the code under ``site`` (a site-packages folder) defines ``where`` (``module:Name.member`` or
    ``module``): read from the source, nothing imported."""
    module, _, path = where.partition(":")
    base = site / module.replace(".", "/")
    source = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
    if not source.is_file():
        return False
    body: list[ast.stmt] = ast.parse(source.read_text()).body
    for name in path.split(".") if path else ():
        node = next((n for n in body if name in _names(n)), None)
        if node is None:
            return False
        body = getattr(node, "body", [])
    return True


def _names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    return set()


def _releases(entry) -> list[str]:
    """The tested release and every release the framework table's grid audits it at."""
    from grpo_identity.app import grid

    audits = grid.load(Path(__file__).resolve().parents[3] / "results" / "frameworks" / "grid.yaml").audits
    return sorted({entry.tested, *(a.release for a in audits if a.environment[0] == entry.name and a.release)})


@pytest.mark.parametrize("entry", list(FRAMEWORK_TABLE.values()), ids=lambda e: e.name)
def test_each_drivers_release_differences_hold_in_the_code_of_every_release_it_is_tested_at(entry):
    """The table's releases are the code's: each difference is defined in every release from its ``since`` on and
    in none before it, read from the sources of the release environments the tests build."""
    from _support import env_or_skip

    differences = importlib.import_module(entry.driver).DIFFERENCES
    assert differences and all(isinstance(d, Difference) for d in differences.values())
    wrong, found = [], set()
    for release in _releases(entry):
        env = Path(env_or_skip(entry.name, release).python).parents[1]
        (site,) = env.glob("lib/python*/site-packages")
        defined = {name for name, d in differences.items() if _defined(site, d.where)}
        found |= defined
        wrong += [
            f"{entry.name} {release}: {name} ({d.where}) is {'not ' * d.expected(release)}in the code, the table says "
            f"since {d.since}"
            for name, d in differences.items()
            if (name in defined) != d.expected(release)
        ]
    assert wrong == []
    assert found == set(differences)  # each is in the code of a tested release: no since beyond them all


def test_a_difference_is_read_from_the_installed_code_and_named_where_it_is_missing():
    present = Difference("grpo_identity.checks.frameworks.contract:StepPlan.geometry", "0.1", "the step's dict")
    assert present.present() and present.expected("0.1") and not present.expected("0.0.9")
    assert Difference("grpo_identity.checks.frameworks.contract", "1", "a module").present()
    field_only = Difference("grpo_identity.checks.frameworks.contract:StepPlan.settings", "1", "a dataclass field")
    assert field_only.present()  # a field with a default factory is no class attribute
    for where in ("no_such_module:X", "no_such_module", "grpo_identity.checks.frameworks.contract:StepPlan.nope"):
        assert not Difference(where, "1", "absent").present()
    with pytest.raises(
        AdapterError, match=r"demo 2.0 has no json.nope, which the driver reads \(a thing; releases from"
    ):
        Difference("json:nope", "3.1", "a thing").require("demo 2.0")
    plan = Difference("grpo_identity.checks.frameworks.contract:StepPlan.split", "1", "a field")
    assert plan.value_of(PLAN) == "two" and Difference("json:JSONDecoder.nope", "9", "-").value_of(PLAN, 7) == 7


def test_two_pin_rows_of_one_release_range_add_up_and_never_replace_each_other(monkeypatch):
    # a second row of the same range once silently dropped the first (loguru and jaxtyping went missing)
    from grpo_identity.checks.frameworks import registry

    row = registry.FrameworkEntry(
        "demo", "1.0", "a demo", pins=(("0.0", "99", ("a",)), ("0.0", "99", ("b",))), no_deps=(("0.0", "99", ("c",)),)
    )
    monkeypatch.setitem(registry.FRAMEWORK_TABLE, "demo", row)
    assert registry.pins_table()[("demo", "0.0", "99")] == ("a", "b")
    assert registry.no_deps_table()[("demo", "0.0", "99")] == ("c",)


def test_per_row_lays_the_micro_batch_records_out_by_row_and_averages_the_ranks():
    from grpo_identity.checks.frameworks.contract import per_row

    records = [
        {"rows": [2, 0], "step": 0, "rank": 0, "micro": 0, "generation": 0, "advantages": [1.0, -1.0],
         "coefficients": [[0.4, 0.4], [-0.2, 0.0]], "mask": [[1, 1], [1, 0]]},
        {"rows": [1, 3], "step": 0, "rank": 1, "micro": 0, "generation": 0, "advantages": [0.5, -0.5],
         "coefficients": [[0.2] * 7, [-0.1]], "mask": [[1] * 7, [1]]},
    ]  # fmt: skip
    out = per_row(records, 4, ranks=2, framework="demo 1.0")
    assert out["coefficients"].shape == (4, 7)  # the widest answer's width
    assert out["coefficients"][2, :2].tolist() == [0.2, 0.2] and out["coefficients"][1, 6] == 0.1
    assert out["rank"].tolist() == [0, 1, 0, 1] and out["advantages"].tolist() == [-1.0, 0.5, 1.0, -0.5]
    with pytest.raises(AdapterError, match="demo 1.0: the trainer trained on 3 of the 4 answers its sampler drew"):
        per_row(records[:1] + [{**records[1], "rows": [1, 1]}], 4, ranks=2, framework="demo 1.0")
