"""The CLI of the trainer's commands: JSON for machines, one-line errors with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_identity import data
from grpo_identity.app.cli import main

ROOT = Path(__file__).resolve().parents[2]
CURVE = data.path(data.DAPO_CURVE)
STORED = ROOT / "results"


def _rates_csv(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_text("llama8b_solve_rate\n" + "".join(f"{k / 64}\n" for k in (0, 0, 64, 64, 16, 32, 32, 48, 4, 60)))
    return path


def test_realdata_json_has_the_documented_keys_and_fractions(tmp_path, capsys):
    assert main(["realdata", str(_rates_csv(tmp_path)), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["n"] == 10 and r["frac_p0"] == 0.2 and r["frac_p1"] == 0.2
    assert set(r["silent_closed_form"]) == {"4", "8", "16", "32", "64"} and set(r["silent_subsampled"]) == {
        "4",
        "8",
        "16",
    }
    fractions = [*r["silent_closed_form"].values(), *r["silent_subsampled"].values()]
    fractions += [v for arm in ("grpo", "dr_grpo") for v in r["mass_share"][arm].values()]
    assert all(0 <= f <= 1 for f in fractions)


def test_realdata_prints_a_table_and_writes_a_figure(tmp_path, capsys):
    assert main(["realdata", str(_rates_csv(tmp_path)), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "G=64" in out and "extreme" in out
    assert (tmp_path / "o" / "realdata.png").stat().st_size > 1000 and (tmp_path / "o" / "summary.json").exists()


def test_realdata_on_a_missing_file_exits_2_with_one_line(tmp_path, capsys):
    assert main(["realdata", str(tmp_path / "absent.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "absent.csv" in err


def test_train_bernoulli_json_and_out_dir(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    assert main(["train", "bernoulli", "--M", "60", "--G", "4", "--steps", "3", "--json", "--out", str(out)]) == 0
    r = json.loads(capsys.readouterr().out)
    for key in ("identity_max_abs_err", "r2_silent", "extreme_share", "hard_final", "dapo_oversample", "seconds"):
        assert key in r
    assert r["config"]["group_size"] == 4
    assert json.loads((out / "config.json").read_text())["num_prompts"] == 60
    assert (out / "bernoulli.png").stat().st_size > 1000 and (out / "result.json").exists()


def test_train_bernoulli_rejects_bad_settings_naming_the_option_not_the_field(capsys):
    assert main(["train", "bernoulli", "--M", "1"]) == 2
    err = capsys.readouterr().err
    assert "--M must be an integer >= 4, got 1" in err and "num_prompts" not in err


def test_train_bernoulli_table_mode_prints_the_identity_verdict_and_what_it_wrote(tmp_path, capsys):
    pytest.importorskip("torch")
    assert main(["train", "bernoulli", "--M", "40", "--steps", "2", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "over every prompt, step and arm: holds" in out and "hardest quartile" in out
    assert f"wrote {tmp_path / 'run' / 'result.json'}" in out


def _stored(name):
    return json.loads((STORED / name).read_text())


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_train_bernoulli_exits_1_when_the_identity_fails(monkeypatch, capsys, as_json):
    pytest.importorskip("torch")
    from grpo_identity.trainer import bernoulli

    result = _stored("bernoulli/result.json") | {"identity_max_abs_err": 1e-6}
    monkeypatch.setattr(bernoulli, "run_bernoulli", lambda config, progress: result)
    assert main(["train", "bernoulli", *(["--json"] if as_json else [])]) == 1
    out = capsys.readouterr().out
    assert json.loads(out)["identity_max_abs_err"] == 1e-6 if as_json else "FAILS the 1e-10 goal" in out


@pytest.mark.parametrize(
    ("err", "code", "verdict"), [(5e-7, 0, "holds"), (1e-2, 1, "FAILS the 0.0001 goal"), (None, 1, "not checked")]
)
def test_train_lm_exit_code_says_whether_the_identity_held(monkeypatch, capsys, err, code, verdict):
    pytest.importorskip("torch")
    from grpo_identity.trainer.lm import train

    summary = _stored("lm-cpu-smoke/summary.json") | {"identity_max_rel_err": err}
    monkeypatch.setattr(train, "run_lm", lambda config, progress, out_dir, **provenance: summary)
    assert main(["train", "lm"]) == code
    assert f"groups: {verdict}" in capsys.readouterr().out
    assert main(["train", "lm", "--json"]) == code


#: the work function of each command that writes into --out, by module
WORK = {
    "train bernoulli": (
        "grpo_identity.trainer.bernoulli",
        "run_bernoulli",
        ["train", "bernoulli", "--M", "10", "--steps", "1"],
    ),
    "train lm": ("grpo_identity.trainer.lm.train", "run_lm", ["train", "lm", "--steps", "1"]),
    "realdata": ("grpo_identity.analysis.realdata", "summarise", ["realdata", "{rates}"]),
    "dapo-fit": ("grpo_identity.analysis.dapo_fit", "fit", ["dapo-fit", str(CURVE), "--bootstrap", "0"]),
    "render": ("grpo_identity.app.render", "render", ["render", "--no-execute"]),
}


@pytest.mark.parametrize("out", ["/dev/null/x", "{file}", "{file}/sub"])
@pytest.mark.parametrize("command", list(WORK))
def test_an_unwritable_out_is_refused_before_the_work_starts(command, out, tmp_path, monkeypatch, capsys):
    import importlib

    module, name, argv = WORK[command]
    if command.startswith("train"):
        pytest.importorskip("torch")

    def work(*args, **kwargs):
        raise AssertionError(f"{name} ran before --out was checked")

    monkeypatch.setattr(importlib.import_module(module), name, work)
    (tmp_path / "afile").write_text("x")
    fill = {"file": tmp_path / "afile", "rates": _rates_csv(tmp_path)}
    assert main([a.format(**fill) for a in [*argv, "--out", out]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err


def test_dapo_fit_on_a_made_curve(tmp_path, capsys):
    path = tmp_path / "curve.csv"
    path.write_text(
        "step,frac\n" + "".join(f"{s},{0.5 * (1 - 2.718281828 ** (-s / 800))}\n" for s in range(0, 6000, 300))
    )
    assert main(["dapo-fit", str(path), "--bootstrap", "10", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["saturating"]["r2"] > 0.999 and r["n_bootstrap"] == 10


@pytest.mark.skipif(not CURVE.exists(), reason="digitised DAPO curve not present in ../shared/data")
def test_dapo_fit_prints_both_r2_beside_the_papers(capsys):
    assert main(["dapo-fit", str(CURVE), "--bootstrap", "20"]) == 0
    out = capsys.readouterr().out
    assert "one timescale" in out and "0.92" in out and "0.98" in out


BAD_RATE_FILES = {
    "empty.csv": "",
    "wrong_column.csv": "solve\n0.5\n",
    "outside.csv": "llama8b_solve_rate\n0.5\n1.5\n",
    "text.csv": "llama8b_solve_rate\nabc\n",
    "histogram_text.csv": "# comment\nsolve_rate,count\n0.5,many\n",
    "text.jsonl": '{"llama8b_solve_rate": "abc"}\n',
}


@pytest.mark.parametrize("name", sorted(BAD_RATE_FILES))
@pytest.mark.parametrize("command", ["realdata", "dapo-fit-rates"])
def test_bad_solve_rate_files_exit_2_with_one_line(tmp_path, capsys, name, command):
    path = tmp_path / name
    path.write_text(BAD_RATE_FILES[name])
    argv = (
        ["realdata", str(path)]
        if command == "realdata"
        else ["dapo-fit", str(CURVE), "--solve-rates", str(path), "--bootstrap", "0"]
    )
    if command != "realdata" and not CURVE.exists():
        pytest.skip("digitised DAPO curve not present")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "text", ["", "step,value\n", "step,value\n1,x\n", "step,value\n" + "".join(f"{i},{i}\n" for i in range(12))]
)
def test_bad_dapo_curves_exit_2_with_one_line(tmp_path, capsys, text):
    path = tmp_path / "curve.csv"
    path.write_text(text)
    assert main(["dapo-fit", str(path), "--bootstrap", "0"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_dapo_fit_on_a_missing_curve_exits_2(tmp_path, capsys):
    assert main(["dapo-fit", str(tmp_path / "absent.csv")]) == 2
    assert "absent.csv" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "sizes", "options"),
    [
        ("train bernoulli", ["--G", "1000000000"], "--M or --G"),
        ("train bernoulli", ["--M", "3000000", "--G", "64"], "--M or --G"),
        ("train lm", ["--G", "1000000000"], "--G"),
        ("train lm", ["--n-embd", "65536", "--n-head", "1"], "--n-embd"),
    ],
)
def test_sizes_over_the_memory_budget_are_refused_before_the_run(command, sizes, options, monkeypatch, capsys):
    import importlib

    pytest.importorskip("torch")
    module, name, argv = WORK[command]

    def work(*args, **kwargs):
        raise AssertionError(f"{name} ran with sizes over the budget")

    monkeypatch.setattr(importlib.import_module(module), name, work)
    assert main([*argv, *sizes]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "over the budget of 16 GiB" in err and options in err


def test_the_papers_settings_and_the_named_lm_sizes_fit_the_memory_budget():
    from grpo_identity.app.commands import train_bernoulli, train_lm
    from grpo_identity.app.options import over_budget
    from grpo_identity.trainer.config import BernoulliConfig
    from grpo_identity.trainer.lm.config import CONFIGS, modes_of
    from grpo_identity.trainer.lm.task import VOCAB

    c = BernoulliConfig()
    assert over_budget(train_bernoulli.memory_terms(c.num_prompts, c.group_size, c.max_draws, c.steps)) is None
    for cfg in CONFIGS.values():
        assert over_budget(train_lm.memory_terms(cfg, len(VOCAB), len(modes_of(cfg)))) is None


def test_a_larger_budget_from_the_environment_lets_the_run_start(monkeypatch, capsys):
    pytest.importorskip("torch")
    from grpo_identity.trainer import bernoulli

    monkeypatch.setenv("GRPO_IDENTITY_MEMORY_GIB", "1e9")
    monkeypatch.setattr(bernoulli, "run_bernoulli", lambda config, progress: _stored("bernoulli/result.json"))
    assert main(["train", "bernoulli", "--G", "1000000000", "--json"]) == 0
    monkeypatch.setenv("GRPO_IDENTITY_MEMORY_GIB", "1")
    assert main(["train", "bernoulli", "--M", "8000000"]) == 2
    assert "over the budget of 1 GiB" in capsys.readouterr().err
