"""The allocation experiment: fixed G against allocate() at equal total samples, Bernoulli-logit."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from grpo_identity.trainer.allocation import ALLOCATION_ARMS, main, run_allocation  # noqa: E402
from grpo_identity.trainer.config import BernoulliConfig  # noqa: E402

SMALL = BernoulliConfig(num_prompts=60, steps=4, seed=3)


@pytest.fixture(scope="module")
def small():
    return run_allocation(SMALL, eps=0.1)


def test_the_identity_holds_for_every_group_size_the_allocator_chooses(small):
    assert small["identity_max_abs_err"] < 1e-12
    assert max(small["curves"]["allocated"]["max_group"]) > SMALL.group_size  # the allocator does vary G


def test_no_step_of_the_allocated_arm_spends_more_rollouts_than_the_fixed_arm(small):
    fixed = np.diff([0.0, *small["curves"]["fixed"]["samples"]])
    alloc = np.diff([0.0, *small["curves"]["allocated"]["samples"]])
    assert np.all(fixed == SMALL.num_prompts * SMALL.group_size) and np.all(alloc <= fixed)
    assert small["samples"]["allocated"] <= small["samples"]["fixed"]


def test_both_arms_start_from_the_same_prompts_and_report_every_measurement(small):
    for arm in ALLOCATION_ARMS:
        c = small["curves"][arm]
        assert c["hard_mean_p"][0] == pytest.approx(small["hard_initial"], rel=1e-12)
        assert len(c["silent_frac"]) == SMALL.steps and 0 <= small["silent_frac"][arm] <= 1
    assert small["hard_initial"] < small["hard_final"]["fixed"]  # GRPO learns the hard prompts


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--eps", "1.5"], "--eps must be in (0, 1), got 1.5"),
        (["--M", "2"], "--M must be an integer >= 4, got 2"),
        (["--G", "1"], "--G must be an integer >= 2, got 1"),
        (["--out", "no/such/result.json"], "--out no/such/result.json: folder no/such does not exist"),
    ],
)
def test_bad_input_is_one_line_on_stderr_naming_the_option_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--steps", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and err[0].endswith(message)


def test_the_result_file_records_its_command_and_the_versions_it_ran_with(tmp_path, capsys):
    import json
    import shlex

    out = tmp_path / "seed3.json"
    argv = ["--M", "40", "--steps", "2", "--seed", "3", "--json", "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    prov = json.loads(out.read_text())["provenance"]
    assert shlex.split(prov["command"]) == ["python", "-m", "grpo_identity.trainer.allocation", *argv]
    assert prov["versions"]["torch"] is not None and "python" in prov and "commit" in prov
