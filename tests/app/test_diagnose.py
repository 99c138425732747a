"""``grpo-identity diagnose LOGDIR``: read back what a run logged, draw one page, check it in a
headless browser."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from grpo_identity.app.cli import main
from grpo_identity.app.render import browser_dom, browser_executable

DATA = Path(__file__).parent / "data"
P = (0.05, 0.5, 1.0)  # a hard prompt, a medium one, one always solved (silent)


def group_records(steps: int = 6, G: int = 4) -> list[dict]:
    """Per-group rewards records: prompt q<i> solves the first round(p·G) answers, shifted each step."""
    recs = []
    for s in range(steps):
        for i, p in enumerate(P):
            k = round(p * G) if p in (0.5, 1.0) else s % 2  # the hard prompt: silent on even steps
            recs.append({"step": s, "prompt": f"q{i}", "rewards": [1.0] * k + [0.0] * (G - k)})
    return recs


def write_jsonl(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def plain_trl_run(d, release="1.16.0", step=8):
    """A TRL output folder as TRL leaves it: checkpoint-N/trainer_state.json (a real one, written
    by tests/app/data/make_trl_state.py under that release), no callback of this project."""
    (d / f"checkpoint-{step}").mkdir()
    return shutil.copyfile(DATA / f"trl-{release}.trainer_state.json", d / f"checkpoint-{step}" / "trainer_state.json")


def run(capsys, *argv):
    code = main(["diagnose", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_per_group_rewards_give_the_silent_fraction_of_each_step(tmp_path, capsys):
    write_jsonl(tmp_path / "groups.jsonl", group_records())
    code, out, _ = run(capsys, tmp_path, "--json")
    assert code == 0
    series = json.loads(out)["series"]
    # step s: the always-solved prompt is silent; the hard one on even steps
    assert series["silent_frac"] == [[s, (2 if s % 2 == 0 else 1) / 3] for s in range(6)]
    assert (tmp_path / "diagnose.html").is_file()


def test_the_latest_checkpoints_trainer_state_is_read(tmp_path, capsys):
    for step, value in ((2, 0.25), (4, 0.75)):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        log = [{"step": s, "loss": 0.0, "identity/silent_frac": value} for s in range(1, step + 1)]
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": log}))
    code, out, _ = run(capsys, tmp_path, "--json")
    assert code == 0 and json.loads(out)["series"] == {"silent_frac": [[s, 0.75] for s in (1, 2, 3, 4)]}


def test_verls_file_logger_records_are_read(tmp_path, capsys):
    write_jsonl(
        tmp_path / "metrics.jsonl", [{"step": 1, "data": {"identity/recommended_G": 12, "critic/score/mean": 0.5}}]
    )
    code, out, _ = run(capsys, tmp_path / "metrics.jsonl", "--json")
    assert code == 0 and json.loads(out)["series"] == {"recommended_G": [[1, 12]]}
    assert (tmp_path / "diagnose.html").is_file()


def test_the_table_names_every_metric_with_its_last_value(tmp_path, capsys):
    write_jsonl(tmp_path / "groups.jsonl", group_records())
    code, out, _ = run(capsys, tmp_path)
    assert (
        code == 0
        and re.search(r"^silent_frac\s+6\s+5\s+0\.333333$", out, re.M)
        and out.rstrip().endswith("diagnose.html")
    )


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (lambda d: None, ["{d}/missing"], "LOGDIR {d}/missing does not exist"),
        (lambda d: None, [], "no identity/ metrics, no per-group rewards and no TRL reward metrics under {d}"),
        (lambda d: plain_trl_run(d), ["--G", "1"], "--G must be an integer from 2 to 1,000,000, got 1"),
        (lambda d: plain_trl_run(d), ["--G", "1000001"], "--G must be an integer from 2 to 1,000,000, got 1000001"),
        (lambda d: (d / "a.jsonl").write_text('{"step": 1, "rewards": [1, 0]}\n{oops\n'), [], "a.jsonl:2: not JSON"),
        (
            lambda d: (d / "a.jsonl").write_text('{"rewards": [1, 0]}\n'),
            [],
            'a.jsonl:1: a record must be a JSON object with a numeric "step"',
        ),
        (
            lambda d: write_jsonl(d / "a.jsonl", [{"step": 0, "rewards": [1, 0]}, {"step": 0, "rewards": [1, 0, 0]}]),
            [],
            "step 0: groups of different sizes [2, 3]",
        ),
        (
            lambda d: write_jsonl(d / "a.jsonl", [{"step": 0, "rewards": [1, "x"]}]),
            [],
            "step 0: rewards and advantages must be lists of 2 numbers",
        ),
        (
            lambda d: write_jsonl(d / "a.jsonl", group_records()),
            ["--eps", "1.5"],
            "--eps must be in [1e-06, 1), got 1.5",
        ),
        (lambda d: write_jsonl(d / "a.jsonl", group_records()), ["--dial", "ppo"], "--dial: unknown preset 'ppo'"),
        (
            lambda d: write_jsonl(d / "a.jsonl", group_records()),
            ["--out", "{d}/no/such/page.html"],
            "--out {d}/no/such/page.html: folder {d}/no/such does not exist",
        ),
        (
            lambda d: write_jsonl(d / "a.jsonl", [{"step": 0, "rewards": 5}]),
            [],
            'step 0: "rewards" must be a list of numbers, got int',
        ),
        (
            lambda d: (d / "trainer_state.json").write_text("[1, 2]"),
            [],
            "trainer_state.json: a trainer_state.json must hold a JSON object, got list",
        ),
        (
            lambda d: (d / "trainer_state.json").write_text('{"log_history": [1]}'),
            [],
            'trainer_state.json: "log_history" must be a list of JSON objects',
        ),
    ],
)
def test_bad_input_is_one_line_on_stderr_exit_2_and_no_page(tmp_path, capsys, setup, args, message):
    setup(tmp_path)
    argv = [a.format(d=tmp_path) for a in args]
    target = argv.pop(0) if argv and not argv[0].startswith("--") else tmp_path
    code, out, err = run(capsys, target, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message.format(d=tmp_path) in err and "Traceback" not in err
    assert not list(tmp_path.rglob("*.html")) and not list(tmp_path.rglob("*.partial"))


@pytest.mark.skipif(
    browser_executable() is None, reason="no headless Chromium on PATH (Debian: apt-get install chromium)"
)
def test_the_page_opens_in_a_headless_browser_with_every_curve_drawn(tmp_path, capsys):
    write_jsonl(tmp_path / "groups.jsonl", group_records())
    code, out, _ = run(capsys, tmp_path, "--json")
    series = json.loads(out)["series"]
    dom = browser_dom(tmp_path / "diagnose.html", budget_ms=2000)
    figures = re.findall(r'<figure id="([a-z_]+)">', dom)
    assert figures == ["silent", "mass", "deviation", "fidelity", "group_size"]
    lines = dict(re.findall(r'<polyline class="series" data-name="([^"]+)"[^>]* points="([^"]+)"', dom))
    assert len(lines["measured"].split()) == len(series["silent_frac"]) == 6
    assert len(lines["predicted"].split()) == len(series["silent_frac_pred"])
    assert {"extreme (p &lt; 0.1 or &gt; 0.9)", "medium (0.4 to 0.6)", "recommended", "used", "medium"} <= set(lines)


def test_a_plain_trl_run_gives_a_page_comparing_the_logged_zero_std_fraction_with_the_prediction(tmp_path, capsys):
    state = json.loads(plain_trl_run(tmp_path).read_text())
    code, out, _ = run(capsys, tmp_path, "--G", "4", "--json")
    assert code == 0
    res = json.loads(out)
    logged = [(e["step"], e["frac_reward_zero_std"]) for e in state["log_history"] if "reward" in e]
    assert [tuple(p) for p in res["series"]["frac_reward_zero_std"]] == logged
    r = {e["step"]: e["reward"] for e in state["log_history"] if "reward" in e}
    assert res["series"]["silent_frac_bound"] == [[s, pytest.approx(r[s] ** 4 + (1 - r[s]) ** 4)] for s in r]
    assert len(res["series"]["silent_frac_model"]) == len(r) - 1  # the first step has no step before it
    trl = res["trl"]
    assert trl["group_size"] == 4 and trl["group_size_source"] == "--G" and 0 < trl["saturated_share"] < 1
    assert [row["label"] for row in trl["cost"]] == ["G/2", "G (this run)", "fidelity 0.9 at r̄", "2G", "4G"]
    page = (tmp_path / "diagnose.html").read_text()
    assert '<figure id="trl_silent">' in page and '<figure id="trl_reward">' in page and 'id="trl"' in page
    assert res["figures"]["trl_silent"]["ylim"] == [0.0, 1.0]


@pytest.mark.parametrize("release", ["0.16.0", "0.22.2", "1.16.0"])
def test_every_trl_releases_trainer_state_is_read_and_the_checkpoint_or_the_file_itself_may_be_named(
    tmp_path, capsys, release
):
    state = plain_trl_run(tmp_path, release)
    for target in (state, state.parent):
        code, out, _ = run(capsys, target, "--group-size", "4", "--json")
        res = json.loads(out)
        assert code == 0 and len(res["series"]["reward"]) == 8 and (state.parent / "diagnose.html").is_file()
    # TRL 0.16 does not log frac_reward_zero_std (0.18 added it): the predictions alone, and a note
    assert ("frac_reward_zero_std" in res["series"]) == (release != "0.16.0")
    assert any("did not log frac_reward_zero_std" in n for n in res["trl"]["notes"]) == (release == "0.16.0")


def test_an_unrelated_completions_file_beside_a_trainer_state_is_ignored_with_a_note(tmp_path, capsys):
    plain_trl_run(tmp_path)
    write_jsonl(tmp_path / "completions.jsonl", [{"prompt": "a b", "completion": "c", "reward": 1.0}])
    write_jsonl(tmp_path / "other.jsonl", [{"step": 1, "completion": "c"}])
    code, out, err = run(capsys, tmp_path, "--G", "4")
    assert code == 0 and err == ""
    assert re.search(
        r"^note: ignored completions\.jsonl: not written by grpo-identity's callback \(completions\.jsonl:1: "
        r'a record must be a JSON object with a numeric "step"\)$',
        out,
        re.M,
    )
    assert "note: ignored other.jsonl: no identity/ metrics and no per-group rewards records" in out
    assert "ignored completions.jsonl" in (tmp_path / "diagnose.html").read_text()


def test_the_callbacks_logged_group_size_stands_in_for_g(tmp_path, capsys):
    log = [{"step": 1, "reward": 0.5, "frac_reward_zero_std": 0.25, "identity/group_size": 8.0}]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 1, "log_history": log}))
    code, out, _ = run(capsys, tmp_path, "--json")
    trl = json.loads(out)["trl"]
    assert code == 0 and trl["group_size"] == 8 and trl["steps"][0]["silent_bound"] == pytest.approx(2 * 0.5**8)


def test_the_deviation_figure_draws_its_tolerance_and_float_noise_stays_far_under_it(tmp_path, capsys):
    from grpo_identity.checks.measure.properties import Tolerance
    from grpo_identity.integrations.diagnose import TOL_HEADROOM

    tol = Tolerance.for_precision("float32").rtol
    write_jsonl(tmp_path / "m.jsonl", [{"step": s, "identity/coef_dev_max": 5.55e-17 * (s % 2)} for s in range(4)])
    code, out, _ = run(capsys, tmp_path, "--json")
    fig = json.loads(out)["figures"]["deviation"]
    assert code == 0 and fig["tolerance"] == tol and fig["ylim"][0] == 0 and fig["ylim"][1] >= TOL_HEADROOM * tol
    svg = re.search(r'<figure id="deviation">.*?</figure>', (tmp_path / "diagnose.html").read_text()).group(0)
    assert f'class="tolerance" data-value="{tol:g}"' in svg
    ys = [float(p.split(",")[1]) for p in re.search(r'points="([^"]+)"', svg).group(1).split()]
    assert max(ys) - min(ys) < 0.5  # the noise is flat on the page (in pixels), not spikes


def test_a_plain_trl_run_without_the_group_size_draws_its_logged_series_and_says_which_option_adds_the_prediction(
    tmp_path, capsys
):
    plain_trl_run(tmp_path)
    code, out, _ = run(capsys, tmp_path, "--json")
    report = json.loads(out)
    assert code == 0 and report["trl"] is None and set(report["series"]) == {"reward", "frac_reward_zero_std"}
    assert report["notes"] == [
        "trainer_state.json: the group size is not recorded in trainer_state.json; pass --G (TRL's num_generations) "
        "for the identity's prediction of the silent fraction and the group-size cost"
    ]
    assert "pass --G" in (tmp_path / "diagnose.html").read_text()


def test_a_mean_reward_too_rare_for_any_group_size_to_reach_the_fidelity_still_gives_the_page(tmp_path, capsys):
    log = [{"step": s, "reward": 1e-9, "frac_reward_zero_std": 1.0} for s in (1, 2, 3)]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 3, "log_history": log}))
    code, out, _ = run(capsys, tmp_path, "--G", "8", "--json")
    labels = [row["label"] for row in json.loads(out)["trl"]["cost"]]
    assert code == 0 and labels == ["G/2", "G (this run)", "2G", "4G"]  # no G within 10⁷ reaches fidelity 0.9


def test_a_jsonl_that_is_not_utf8_beside_a_trl_log_is_ignored_with_a_note_naming_it(tmp_path, capsys):
    plain_trl_run(tmp_path)
    (tmp_path / "dump.jsonl").write_bytes(b"\xff\xfe{}\n")
    code, out, _ = run(capsys, tmp_path, "--G", "4", "--json")
    assert code == 0 and json.loads(out)["ignored"] == [
        "ignored dump.jsonl: not written by grpo-identity's callback (dump.jsonl:1: not UTF-8 text (byte 0))"
    ]
