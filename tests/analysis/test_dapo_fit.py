"""DAPO consistency fit: the minimiser, the competence model and the fit on DAPO's curve (claim 6)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from grpo_identity import data
from grpo_identity.analysis.dapo_fit import (
    MAX_BOOTSTRAP,
    competence_prediction,
    fit,
    fit_competence,
    fit_saturating,
    minimise_scalar,
    plateau_temperature,
    read_curve,
    rescaled_competence,
)
from grpo_identity.analysis.solve_rates import big_math, from_histogram

CURVE = data.path(data.DAPO_CURVE)  # shipped with the package


def test_the_minimiser_finds_interior_and_boundary_minima():
    x, _ = minimise_scalar(lambda t: (math.log(t) - 1.0) ** 2, 1e-3, 1e3, log=True)
    assert x == pytest.approx(math.e, rel=1e-6)
    x, _ = minimise_scalar(lambda t: t, 2.0, 5.0)
    assert x == pytest.approx(2.0, abs=1e-6)
    with pytest.raises(ValueError):
        minimise_scalar(lambda t: t, 0.0, 1.0, log=True)


def test_plateau_temperature_solves_the_one_point_case_by_hand():
    v, w = np.array([0.5]), np.array([1.0])
    T = plateau_temperature(v, w, 0.25)  # 0.5^(32/T) = 0.25  =>  T = 16
    assert T == pytest.approx(16.0, rel=1e-10)
    with pytest.raises(ValueError, match="plateau"):
        plateau_temperature(v, w, 1e-12)


def test_rescaled_competence_runs_from_zero_to_one_and_turns_linear_for_long_timescales():
    s = np.linspace(100, 900, 9)
    c = rescaled_competence(s, 200.0)
    assert c[0] == 0.0 and c[-1] == pytest.approx(1.0) and np.all(np.diff(c) > 0)
    np.testing.assert_allclose(rescaled_competence(s, 1e9), (s - 100) / 800, atol=1e-6)


def test_the_saturating_fit_recovers_its_own_parameters():
    s = np.linspace(50, 5000, 40)
    y = 0.6 * -np.expm1(-(s - 50) / 900.0)
    r = fit_saturating(s, y)
    assert r["a"] == pytest.approx(0.6, rel=1e-5) and r["tau"] == pytest.approx(900.0, rel=1e-4) and r["r2"] > 1 - 1e-9


def test_the_competence_fit_recovers_its_own_timescale():
    sr = from_histogram([0.25, 0.5, 0.75], [1, 2, 1])
    s = np.linspace(0, 3000, 30)
    y = competence_prediction(s, 700.0, sr.values, sr.weights, 20.0)
    # the curve ends at E[p^(32/20)]; given that plateau the fit must find T_end = 20 and tau = 700
    r = fit_competence(s, y, sr, plateau=float(y[-1]))
    assert r["t_end"] == pytest.approx(20.0, rel=1e-8)
    assert r["tau"] == pytest.approx(700.0, rel=1e-4) and r["r2"] > 1 - 1e-9


def test_read_curve_skips_quoted_comments_and_rejects_bad_rows(tmp_path):
    good = tmp_path / "c.csv"
    good.write_text('"# source"\n# note\nstep,value\n' + "".join(f"{i * 10},{i / 20}\n" for i in range(12)))
    s, y = read_curve(good)
    assert s.size == 12 and y[-1] == pytest.approx(0.55)
    bad = tmp_path / "b.csv"
    bad.write_text("step,value\n1,x\n")
    with pytest.raises(ValueError, match="two numbers"):
        read_curve(bad)


def test_the_dapo_curve_is_fitted_well_by_both_models_with_ordered_bootstrap_intervals():
    r = fit(CURVE, big_math(), n_bootstrap=40, seed=1)
    assert r["n_points"] == 60
    for model in ("competence", "saturating"):
        lo, hi = r[model]["r2_bootstrap"]
        assert 0.9 < r[model]["r2"] < 1.0 and lo <= hi
    assert r["competence"]["plateau"] == pytest.approx(np.mean(read_curve(CURVE)[1][-8:]))
    assert r["paper"]["competence_r2"] == 0.92
    # pinned: R² of both fits with the shipped Big-Math rates (results/dapo_fit; paper: 0.92, 0.98)
    assert "Big-Math" in r["solve_rate_source"]
    assert r["competence"]["r2"] == pytest.approx(0.961, abs=0.002)
    assert r["saturating"]["r2"] == pytest.approx(0.976, abs=0.002)


def _curve_rows(n=12):
    return "".join(f"{i * 10},{i / 20}\n" for i in range(n))


def test_read_curve_keeps_the_first_row_when_there_is_no_header(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text(_curve_rows())
    s, y = read_curve(path)
    assert s.size == 12 and s[0] == 0.0


def test_read_curve_ignores_a_byte_order_mark_before_a_comment(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(("\ufeff" + '"# source"\nstep,value\n' + _curve_rows()).encode("utf-8"))
    assert read_curve(path)[0].size == 12


@pytest.mark.parametrize("bad", ["nan", "1.5", "-0.1", "inf"])
def test_read_curve_rejects_values_that_are_not_fractions(tmp_path, bad):
    path = tmp_path / "c.csv"
    path.write_text("step,value\n" + _curve_rows() + f"130,{bad}\n")
    with pytest.raises(ValueError, match=r"fraction in \[0, 1\]"):
        read_curve(path)


@pytest.mark.parametrize("bad", [-1, MAX_BOOTSTRAP + 1, 1_000_000, True, 2.0])
def test_the_number_of_bootstrap_resamples_is_bounded(bad):
    with pytest.raises(ValueError, match=r"^n_bootstrap must be an integer from 0 to 10,000, got "):
        fit(CURVE, n_bootstrap=bad)


def test_an_undecodable_curve_is_an_error_naming_it(tmp_path):
    path = tmp_path / "curve.csv"
    path.write_bytes(b"step,value\n1,0.5\n\xff\xfe\n")
    with pytest.raises(ValueError, match="curve.csv is not UTF-8 text") as e:
        read_curve(path)
    assert "\n" not in str(e.value)


def test_the_stored_fit_records_its_command_and_the_versions_it_ran_with(tmp_path, capsys):
    import json

    pytest.importorskip("matplotlib")
    from grpo_identity.app.cli import main

    argv = ["dapo-fit", "--bootstrap", "5", "--json", "--out", str(tmp_path)]
    assert main(argv) == 0
    capsys.readouterr()
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert prov["command"] == "grpo-identity " + " ".join(argv) and prov["versions"]["numpy"] is not None
