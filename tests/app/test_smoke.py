"""Every subcommand, run in-process with a tiny budget, in table mode and in --json mode: exit 0,
the table's header in the text, JSON that parses with the documented keys."""

from __future__ import annotations

import json

import pytest

from grpo_identity import data
from grpo_identity.app.cli import main

CURVE = str(data.path(data.DAPO_CURVE))
TINY_LM = [
    "train",
    "lm",
    "--mode",
    "dapo",
    "--steps",
    "2",
    "--warmup-steps",
    "100",
    "--n-layer",
    "1",
    "--n-embd",
    "16",
    "--n-head",
    "2",
    "--max-digits",
    "1",
    "--eval-prompts-per-level",
    "8",
    "--prompts-per-step",
    "4",
    "--probe-samples",
    "0",
    "--eval-every",
    "1",
]


def _rates(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_text("llama8b_solve_rate\n" + "".join(f"{k / 64}\n" for k in (0, 64, 16, 32, 48, 4, 60)))
    return str(path)


@pytest.fixture
def cheap_verify(monkeypatch):
    """verify with every stage replaced by one passing item: the command layer, not the job."""
    from grpo_identity import claims
    from grpo_identity.analysis import claims as AC
    from grpo_identity.checks import claims as CC
    from grpo_identity.proofs import claims as PC
    from grpo_identity.trainer import claims as TC

    one = lambda section: [claims.checked(section, f"{section} smoke item", 1, 1, True)]  # noqa: E731
    for module, stage in ((PC, "theorems"), (AC, "closed_forms"), (TC, "stored_lm")):
        monkeypatch.setattr(module, stage, lambda stage=stage: one(stage))
    monkeypatch.setattr(CC, "audits", lambda frameworks, n: one("audits"))
    monkeypatch.setattr(TC, "controlled_run", lambda solve_rates=None, spread_path=None: one("bernoulli"))
    monkeypatch.setattr(AC, "dapo_fit", lambda curve, solve_rates: one("dapo"))
    monkeypatch.setattr(AC, "big_math", lambda solve_rates: one("realdata"))


#: name -> (argv with {tmp} and {rates} to fill, a header line of the table, keys of the JSON)
CASES = {
    "closed-forms": (["closed-forms", "--G", "8", "--p", "0.3"], "k  sigma", {"sigma_by_k", "fidelity", "group_size"}),
    "closed-forms table": (["closed-forms", "--table", "group-size"], "90 %", {"rows"}),
    "train bernoulli": (
        ["train", "bernoulli", "--M", "40", "--steps", "2"],
        "arm      hardest quartile",
        {"identity_max_abs_err", "r2_silent", "hard_final"},
    ),
    "realdata": (["realdata", "{rates}"], "silent fraction", {"frac_p0", "silent_closed_form", "mass_share"}),
    "dapo-fit": (["dapo-fit", CURVE, "--bootstrap", "5"], "model", {"competence", "saturating", "n_points"}),
    "prove": (["prove", "-k", "T2"], "theorem  title", {"all_proved", "theorems"}),
    "verify": (
        ["verify", "--no-render", "--no-frameworks", "--out", "{tmp}/verify"],
        "claim",
        {"all_ok", "counts", "items"},
    ),
}
SLOW_CASES = {
    "train lm": (TINY_LM, "mode  aggregation", {"identity_max_rel_err", "modes", "groups_checked"}),
    "audit": (["audit", "grpo", "--max-examples", "5"], "verdict: PASS", {"verdict"}),
    "render": (["render", "--no-execute", "--out", "{tmp}/nb"], "notebook", {"notebooks", "index", "ok"}),
}
ALL = {**CASES, **{k: pytest.param(*v, marks=pytest.mark.slow) for k, v in SLOW_CASES.items()}}


def _argv(argv, tmp_path):
    return [a.format(tmp=tmp_path, rates=_rates(tmp_path) if a == "{rates}" else "") for a in argv]


@pytest.mark.parametrize(("argv", "header", "keys"), list(ALL.values()), ids=list(ALL))
def test_every_subcommand_prints_a_table_with_its_header(argv, header, keys, tmp_path, capsys, cheap_verify):
    assert main(_argv(argv, tmp_path)) == 0
    out = capsys.readouterr().out
    assert header in out
    with pytest.raises(json.JSONDecodeError):  # a table, not JSON
        json.loads(out)


@pytest.mark.parametrize(("argv", "header", "keys"), list(ALL.values()), ids=list(ALL))
def test_every_subcommand_prints_json_that_parses_with_its_keys(argv, header, keys, tmp_path, capsys, cheap_verify):
    assert main([*_argv(argv, tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert keys <= set(out)


def test_closed_forms_at_a_million_shows_a_bounded_sigma_table_and_says_so(capsys):
    assert main(["closed-forms", "--G", "1000000", "--p", "0.3"]) == 0
    text = capsys.readouterr().out
    assert "sigma for 65 of the 1,000,001 values of k" in text and len(text.splitlines()) < 100
    assert main(["closed-forms", "--G", "1000000", "--p", "0.3", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert len(s["sigma_by_k"]) == 65 and s["sigma_by_k_all"] is False
    assert [r["k"] for r in s["sigma_by_k"][:2]] == [0, 1] and s["sigma_by_k"][-1]["k"] == 1_000_000
    assert s["sigma_by_k"][1]["sigma"] == pytest.approx((1 * 999_999) ** 0.5 / 1e6, rel=1e-12)


def test_closed_forms_up_to_g_64_shows_every_k(capsys):
    assert main(["closed-forms", "--G", "64", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert [r["k"] for r in s["sigma_by_k"]] == list(range(65)) and s["sigma_by_k_all"] is True
