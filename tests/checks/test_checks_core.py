"""The checks' building blocks: the public API, strategies, properties, dial inference, the
child-process runner and the ``audit`` command."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grpo_identity.checks as checks
from grpo_identity import dial as D
from grpo_identity.app.cli import main
from grpo_identity.checks import properties as P
from grpo_identity.checks.infer import infer_dial, infer_keep_rule, probe_batch
from grpo_identity.checks.strategies import reward_batches, score_matrices
from grpo_identity.checks.target import ChildTarget, LocalTarget, TargetImportError, TargetTimeout

CTX64 = P.Context(P.Tolerance.for_precision("float64"))


def dial_fn(d):
    return lambda r, G: D.advantages(r, G, d)


# --- public API ----------------------------------------------------------------------------------
def test_every_public_name_is_importable_and_listed():
    assert checks.__all__ == sorted(checks._EXPORTS)
    for name in checks.__all__:
        assert getattr(checks, name) is not None
    with pytest.raises(AttributeError):
        checks.no_such_name  # noqa: B018


def test_importing_checks_loads_neither_torch_sympy_nor_hypothesis():
    code = "import grpo_identity.checks, sys; print([m for m in ('torch', 'sympy', 'hypothesis') if m in sys.modules])"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    )


# --- strategies ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"kinds": ("bernoulli",)}, "kinds"),
        ({"min_groups": 0}, "min_groups"),
        ({"max_groups": 1, "min_groups": 2}, "max_groups"),
        ({"layouts": ()}, "layouts"),
        ({"dtypes": ("float8",)}, "dtypes"),
    ],
)
def test_bad_strategy_options_fail_when_the_strategy_is_built(kwargs, word):
    with pytest.raises(ValueError, match=word):
        reward_batches(**kwargs)


@settings(max_examples=40)
@given(
    batch=reward_batches(
        layouts=("contiguous", "shuffled"), dtypes=("float64", "float32", "torch.float32", "torch.bfloat16")
    )
)
def test_drawn_batches_have_whole_groups_and_their_layout_undoes(batch):
    r = batch.contiguous()
    assert r.shape == (batch.n_groups * batch.group_size,) and 2 <= batch.group_size <= 256
    R = r.reshape(-1, batch.group_size)
    if batch.group_ids is not None:  # shuffled rows: the ids name each row's group
        ids = np.asarray(batch.group_ids)
        for g in range(batch.n_groups):
            got = (
                np.sort(np.asarray(batch.rewards, dtype=np.float64)[ids == g])
                if not hasattr(batch.rewards, "float")
                else np.sort(batch.rewards.float().numpy()[ids == g])
            )
            assert np.allclose(got, np.sort(R[g]), rtol=1e-2)
    if batch.kind == "binary":
        assert set(np.unique(r)) <= {0.0, 1.0}
        assert [int(row.sum()) for row in R] == list(batch.num_correct)


@settings(max_examples=20)
@given(data=st.data())
def test_score_matrices_have_one_row_per_answer(data):
    s = data.draw(score_matrices(12, max_dims=3))
    assert s.shape[0] == 12 and s.ndim <= 4


# --- properties ----------------------------------------------------------------------------------
@settings(max_examples=30)
@given(batch=reward_batches(max_groups=4), seed=st.integers(0, 2**16))
def test_every_property_holds_for_every_preset(batch, seed):
    for d in (D.GRPO, D.DR_GRPO, D.RLOO, D.TRL):
        ctx = P.Context(P.Tolerance.for_precision("float64"), reference=dial_fn(d))
        for prop in P.ADVANTAGE_PROPERTIES:
            prop(dial_fn(d), batch, ctx, np.random.default_rng(seed))


def _batch(rewards, G, kind="binary"):
    return checks.RewardBatch(np.asarray(rewards, dtype=np.float64), G, kind)


@pytest.mark.parametrize(
    "prop, fn, word",
    [
        (P.well_formed, lambda r, G: r[:-1], "shape"),
        (P.well_formed, lambda r, G: np.full_like(r, np.nan), "non-finite"),
        (P.silent_groups_exactly_zero, lambda r, G: r * 0 + 1e-9, "instead of exactly 0"),
        (P.two_valued_per_group, lambda r, G: -dial_fn(D.GRPO)(r, G), "wrong sign"),
        (P.two_valued_per_group, lambda r, G: dial_fn(D.GRPO)(r, G) * (1 + 0.1 * np.arange(len(r))), "more than two"),
        (P.zero_sum_per_group, lambda r, G: r, "sums to"),
        (P.groups_independent, lambda r, G: r - r.mean(), "coupled"),
        (
            P.permutation_equivariant,
            lambda r, G: np.sort(dial_fn(D.GRPO)(r, G).reshape(-1, G), 1).reshape(-1),
            "permuting",
        ),
    ],
)
def test_each_property_names_itself_and_gives_a_counterexample(prop, fn, word):
    batch = _batch([1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1], 4)
    with pytest.raises(P.PropertyViolation, match=word) as info:
        prop(fn, batch, CTX64, np.random.default_rng(1))
    assert info.value.property == prop.__name__
    assert info.value.counterexample["group_size"] == 4 and "rewards" in info.value.counterexample


def test_a_stateful_target_breaks_statelessness():
    calls = []

    def fn(r, G):
        calls.append(1)
        return dial_fn(D.GRPO)(r, G) * len(calls)

    with pytest.raises(P.PropertyViolation, match="keeps state"):
        P.stateless(fn, _batch([1, 0, 0, 1], 2), CTX64, np.random.default_rng(0))


def test_the_identity_property_checks_g_against_the_score_gap_in_any_dimension():
    wrong = lambda r, G: dial_fn(D.GRPO)(r, G) + np.tile([0.0, 0.1, -0.1, 0.0], len(r) // 4)  # zero-sum, not two-valued  # noqa: E731
    with pytest.raises(P.PropertyViolation, match="is not c"):
        P.identity_in_vector_form(wrong, _batch([1, 1, 0, 0] * 3, 4), CTX64, np.random.default_rng(3))


def test_precision_is_read_from_the_output():
    assert P.precision_of(np.array([0.1, 1 / 3])) == "float64"
    assert P.precision_of(np.array([0.1, 1 / 3], dtype=np.float32).astype(np.float64)) == "float32"


# --- dial inference ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(D.PRESETS))
def test_inference_recovers_every_preset(name):
    d = D.PRESETS[name]
    inf = infer_dial(dial_fn(d))
    assert (inf.centre, inf.scale, inf.alpha) == (d.centre, d.scale, 1.0)
    if d.scale == "group_std":
        assert inf.ddof == d.ddof and inf.eps == pytest.approx(d.eps, rel=1e-3, abs=1e-12)
    assert inf.coefficients[8][3] == pytest.approx(float(D.coefficient(3, 8, d)), rel=1e-9)


@pytest.mark.parametrize(
    "d",
    [
        D.Dial(eps=1e-3),
        D.Dial(centre="loo"),
        D.Dial(scale="batch_std", ddof=1, eps=1e-4),
        D.Dial(centre="loo", scale="batch_std"),
    ],
    ids=["eps", "loo-std", "batch-std", "loo-batch-std"],
)
def test_inference_recovers_points_off_the_presets(d):
    inf = infer_dial(dial_fn(d))
    assert (inf.centre, inf.scale, inf.ddof if d.scale != "none" else 0) == (d.centre, d.scale, d.ddof)
    assert inf.eps == pytest.approx(d.eps, rel=1e-2, abs=1e-9)


def test_inference_in_float32_resolves_verl_epsilon():
    inf = infer_dial(lambda r, G: D.advantages(r.astype(np.float32), G, D.VERL))
    assert inf.precision == "float32" and inf.ddof == 1 and inf.eps == pytest.approx(1e-6, rel=0.1)


def test_a_constant_factor_is_inferred():
    inf = infer_dial(lambda r, G: 2 * D.advantages(r, G, D.GRPO))
    assert inf.scale == "group_std" and inf.alpha == pytest.approx(2.0)


def test_an_epsilon_under_the_square_root_is_inferred_as_such():
    def whiten(r, G):
        R = r.reshape(-1, G)
        return ((R - R.mean(1, keepdims=True)) / np.sqrt(R.var(1, keepdims=True) + 1e-2)).reshape(-1)

    inf = infer_dial(whiten)
    assert (inf.scale, inf.ddof, inf.eps_inside_sqrt, inf.alpha) == ("group_std", 0, True, 1.0)
    assert inf.eps == pytest.approx(1e-2, rel=1e-6)
    r = np.array([1.0, 0.0, 0.0, 0.3, 0.9, 0.1])
    np.testing.assert_allclose(inf.reference()(r, 3), whiten(r, 3), rtol=1e-12)
    assert not infer_dial(dial_fn(D.GRPO)).eps_inside_sqrt


def test_inference_in_bfloat16_finds_the_group_std_and_a_constant_factor():
    def grpo_bf16(r, G, factor=1.0):
        return (factor * D.advantages(r, G, D.GRPO)).astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)

    def as_bf16(r, G, factor=1.0):
        return grpo_bf16(r, G, factor).view(np.float32).astype(np.float64)

    inf = infer_dial(as_bf16)
    assert (inf.precision, inf.scale, inf.ddof, inf.alpha) == ("bfloat16", "group_std", 0, 1.0)
    assert infer_dial(lambda r, G: as_bf16(r, G, 2.0)).alpha == pytest.approx(2.0, rel=0.02)


def test_the_target_wrappers_see_dtype_lists_in_place_updates_and_shared_buffers():
    from grpo_identity.checks.target import output_issue

    r = np.array([1.0, 0.0])
    assert output_issue(r, r.copy(), r - 0.5) is None
    assert "dtype" in output_issue(r, r.copy(), (r - 0.5).astype(np.float32))
    assert "list" in output_issue(r, r.copy(), [0.5, -0.5])
    assert "in place" in output_issue(r, r - 0.5, r - 0.5)
    buf = np.empty(2)

    def shared(rewards, G):
        buf[:] = rewards - rewards.mean()
        return buf

    t = LocalTarget(shared)
    t(r, 2)
    assert t.last_overwrite is None
    t(r + 1.0, 2)
    assert t.last_overwrite is None  # same values: nothing seen overwritten
    t(np.array([0.0, 1.0]), 2)
    assert "shared buffer" in t.last_overwrite


def test_keep_rules_are_inferred_from_filters():
    assert infer_keep_rule(lambda r, G: D.keep_mask(r, G, D.DAPO))[0] == "nonzero_std"
    assert infer_keep_rule(lambda r, G: D.keep_mask(r, G, D.GRPO))[0] == "all"
    assert infer_keep_rule(lambda r, G: r.reshape(-1, G).sum(1) > 0)[0] == "other"


def test_the_probe_batch_has_every_k_once():
    # k = 0…G once each, then two all-wrong groups so that the batch std varies with G
    assert [int(row.sum()) for row in probe_batch(4).reshape(-1, 4)] == [0, 1, 2, 3, 4, 0, 0]


# --- audit ---------------------------------------------------------------------------------------
def test_audit_reports_a_deviation_with_its_factor_table():
    report = checks.audit(dial_fn(D.TRL), expect="grpo", max_examples=30)
    assert report.verdict == "deviation" and report.matches == "trl"
    assert [f["G"] for f in report.factors] == [4, 8, 16, 64]
    assert report.factors[0]["factor_at_half"] == pytest.approx(
        float(D.coefficient(2, 4, D.TRL) / D.coefficient(2, 4, D.GRPO))
    )
    text = report.format()
    assert "DEVIATION" in text and "c reference" in text and "Bessel" in text
    json.dumps(report.to_dict())


def test_audit_of_the_wrong_family_fails():
    report = checks.audit(dial_fn(D.DR_GRPO), expect="grpo", max_examples=20)
    assert report.verdict == "fail" and report.matches == "dr_grpo"
    assert any("wrong family" in f.message for f in report.findings)


def test_audit_of_a_filter_preset_passes_and_a_keep_all_filter_fails_for_dapo():
    assert checks.audit("dapo", kind="filter", max_examples=20, isolate=False).verdict == "pass"
    report = checks.audit("grpo", kind="filter", expect="dapo", max_examples=20, isolate=False)
    assert report.verdict == "fail" and report.findings[0].property == "keeps_groups_with_nonzero_std"


@pytest.mark.parametrize("bad", [{"kind": "filters"}, {"max_examples": 0}, {"timeout": -1}, {"expect": "ppo"}])
def test_audit_rejects_bad_options_in_one_line(bad):
    with pytest.raises(ValueError):
        checks.audit(dial_fn(D.GRPO), **bad)


# --- child process: crashes, hangs, exceptions, import errors ------------------------------------
TARGETS = textwrap.dedent(
    """
    import os, time
    import numpy as np

    def good(rewards, G):
        R = rewards.reshape(-1, G)
        live = np.ptp(R, 1, keepdims=True) > 0
        return np.where(live, R - R.mean(1, keepdims=True), 0.0).reshape(-1)

    def chatty(rewards, G):
        print("debug output on stdout must not break the channel")
        return good(rewards, G)

    def hang(rewards, G):
        time.sleep(60)

    def crash(rewards, G):
        os._exit(7)

    def raises_on_big_groups(rewards, G):
        if G > 32:
            raise RuntimeError("too big")
        return good(rewards, G)

    def raises_sometimes(rewards, G):
        if G % 2 and G > 3:
            raise RuntimeError("odd")
        return good(rewards, G)
    """
)


@pytest.fixture
def target_file(tmp_path):
    path = tmp_path / "targets.py"
    path.write_text(TARGETS)
    return str(path)


def test_a_child_target_answers_calls_even_when_it_prints(target_file):
    with ChildTarget(f"{target_file}:chatty", timeout=20) as t:
        assert t(np.array([1.0, 0.0]), 2).tolist() == [0.5, -0.5]


@pytest.mark.slow
def test_a_hanging_target_times_out_and_the_audit_fails_clearly(target_file):
    report = checks.audit(f"{target_file}:hang", timeout=1.0, max_examples=10)
    assert report.verdict == "fail" and "timeout" in report.findings[0].message
    with ChildTarget(f"{target_file}:hang", timeout=0.5) as t, pytest.raises(TargetTimeout):
        t(np.array([1.0, 0.0]), 2)


def test_a_crashing_target_fails_with_its_exit_code(target_file):
    report = checks.audit(f"{target_file}:crash", max_examples=10)
    assert report.verdict == "fail" and "exit code 7" in report.findings[0].message


@pytest.mark.slow
def test_an_exception_in_the_target_is_a_finding_with_a_shrunk_example(target_file):
    report = checks.audit(f"{target_file}:raises_sometimes", max_examples=200)
    assert report.verdict == "fail"
    f = next(f for f in report.findings if "odd" in f.message)
    assert f.counterexample["group_size"] == 5 and f.counterexample["n_groups"] == 1  # shrunk


@pytest.mark.parametrize(
    "spec, word",
    [
        ("nope/missing.py:fn", "no such file"),
        ("no_such_module_xyz:fn", "No module named"),
        ("{file}:missing", "has no function"),
        ("justaname", "neither"),
    ],
)
def test_import_errors_are_target_import_errors(target_file, spec, word):
    with pytest.raises(TargetImportError, match=word):
        checks.audit(spec.format(file=target_file), max_examples=5)


def test_local_targets_turn_exceptions_into_target_errors():
    def boom(r, G):
        raise KeyError("x")

    with pytest.raises(checks.TargetError, match="KeyError"):
        LocalTarget(boom)(np.zeros(2), 2)


# --- CLI -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_exit_codes_are_0_for_pass_and_deviation_1_for_fail_2_for_usage(target_file, capsys):
    assert main(["audit", f"{target_file}:good", "--max-examples", "20", "--expect", "dr_grpo"]) == 0
    assert "verdict: PASS" in capsys.readouterr().out
    assert main(["audit", "preset:trl", "--max-examples", "20", "--expect", "grpo"]) == 0
    assert main(["audit", f"{target_file}:crash", "--max-examples", "5"]) == 1
    capsys.readouterr()
    assert main(["audit", f"{target_file}:missing"]) == 2
    assert main(["audit", "grpo", "--expect", "ppo"]) == 2
    assert main(["audit", "grpo", "--max-examples", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("grpo-identity audit: error:") for line in err)


def test_cli_json_has_the_documented_fields(target_file, capsys):
    assert main(["audit", f"{target_file}:raises_on_big_groups", "--json", "--max-examples", "10"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert {"target", "kind", "verdict", "matches", "inferred", "findings"} <= set(out)
    assert out["verdict"] == "fail" and out["matches"] is None
    assert {"property", "message", "counterexample"} <= set(out["findings"][0])


@pytest.mark.parametrize("module", ["target", "adapters", "strategies", "properties", "infer", "auditor"])
def test_docstring_examples_of_the_checks_run(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"grpo_identity.checks.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


def test_the_child_does_not_run_under_pytest_s_marker_so_it_sees_the_users_environment(tmp_path, monkeypatch):
    path = tmp_path / "envtarget.py"
    path.write_text(
        "import os, numpy as np\ndef fn(r, G):\n    return np.full(len(r), 1.0 if 'PYTEST_CURRENT_TEST' in os.environ else 0.0)\n"
    )
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/x.py::y (call)")  # as pytest sets it during a test
    with ChildTarget(f"{path}:fn", timeout=20) as t:
        assert t(np.array([1.0, 0.0]), 2).tolist() == [0.0, 0.0]  # the framework's own "under pytest" branches stay off
