"""grpo_identity.checks.export and ``grpo-identity export-tests``: the reference is the dial's advantages times the
objective's weights, the file needs nothing of this project, and an exported TRL test passes on a correct release,
fails on a planted factor and on a release whose step departs from its objective."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.app.cli import main
from grpo_identity.checks import export
from grpo_identity.checks.measure import steps

HARNESS_DIR = Path(export.__file__).parent / "frameworks" / "exported"
#: what an exported test may import besides the standard library
ALLOWED = {"pytest", "torch", "numpy", "trl", "transformers", "datasets", "tokenizers", "verl", "omegaconf", "hydra"}
ALLOWED |= {"tensordict", "einops", "openrlhf", "ray"}


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(str(node.module).split(".")[0])
    return found


@pytest.mark.parametrize("name", ["_check.py", *sorted(file for file, _ in export.HARNESSES.values())])
def test_a_runner_and_the_checks_import_only_pytest_torch_and_the_framework(name):
    extra = _imports(HARNESS_DIR / name) - ALLOWED - set(sys.stdlib_module_names)
    assert not extra, f"{name} imports {sorted(extra)}"
    assert (HARNESS_DIR / name).read_text().count(export.CASE_LINE) == (name != "_check.py")


def test_fit_dial_names_the_point_that_reproduces_the_advantages():
    rewards = np.array([1.0, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0])
    batches = np.repeat([0, 1], 6)
    for point in (D.TRL, D.DR_GRPO):
        A = export.dial_advantages(point, rewards, 4, batches).astype(np.float32).astype(float)
        assert export.fit_dial(rewards, A, 4, batches).same_point(point)
    whitened = (rewards - rewards.mean()) / (rewards.std() + 1e-4)  # a batch-wide whitening: no point of the dial
    assert export.fit_dial(rewards, whitened, 4, batches) is None


def _case(scale: float = 1.0):
    def target(r, G, L, request=None):  # DAPO's token mean over each optimizer step (two per call)
        return steps.micro_batch_mean(r, G, L, request, micro_batches=2, scope="step", scale=scale)

    geo = steps.geometry(4, 16, 16, objective={"name": "token_mean", "setting": "loss=dapo", "budget": 6})
    geo["export"] = {"argv": ["--loss_type", "dapo"], "processes": 1, "release": "0"}
    design = steps.design(geo, 6)
    return export.build_case(steps.run_layout(target, design, "split"), design, geo, 6), design


def test_the_reference_is_the_dials_advantages_over_the_steps_tokens():
    (case, factor), design = _case()
    rows = sorted(case["expected"])
    assert rows == list(range(16)) and factor == pytest.approx(1.0)
    R = design.rewards[:16].reshape(-1, 4)
    A = (R - R.mean(1, keepdims=True)).reshape(-1)  # GRPO's centring (micro_batch_mean does not scale)
    tokens = np.where(design.truncated[:16], 0, design.lengths[:16])
    for i in rows:
        e = case["expected"][i]
        assert e["tokens"] == tokens[i]
        assert e["coefficient"] == pytest.approx(A[i] / tokens.sum(), abs=1e-12)


def test_a_shared_factor_is_measured_while_the_reference_stays_the_objectives():
    (case, factor), _ = _case(scale=0.5)
    (right, _), _ = _case()
    assert factor == pytest.approx(0.5)
    assert case["expected"] == right["expected"]  # the reference never comes from the framework's update


def test_render_writes_the_case_into_the_harness():
    (case, _), _ = _case()
    text = export.render("trl", case, "grpo-identity export-tests trl --out test_x.py", "1.0")
    tree = ast.parse(text)
    assigned = [n for n in tree.body if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "CASE"]
    assert ast.literal_eval(assigned[0].value) == case
    assert text.startswith("# Exported by grpo-identity")
    assert "import grpo_identity" not in text and "from grpo_identity" not in text
    assert max(len(line) for line in text.splitlines()) <= 120


@pytest.mark.parametrize(
    "argv, words",
    [
        (["export-tests", "trl", "--out", "x.txt"], "--out x.txt: a test file ends in .py"),
        (["export-tests", "verl2", "--out", "x.py"], "invalid choice"),
        (["export-tests", "trl", "--release", " ", "--out", "x.py"], "--release is empty"),
        (["export-tests", "trl", "--out", "fifo.py"], "--out fifo.py is not a regular file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "fifo.py")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err
    assert os.listdir(tmp_path) == ["fifo.py"]  # nothing written


def test_a_step_that_raises_dies_or_answers_malformed_is_one_line_exit_2(capsys, tmp_path, monkeypatch):
    from grpo_identity.checks import export
    from grpo_identity.checks.calls.target import TargetMalformed

    def malformed(*_args, **_kwargs):
        raise TargetMalformed("returned a dict without 'rank', which the audit reads beside 'step'")

    monkeypatch.setattr(export, "export_tests", malformed)
    assert main(["export-tests", "trl", "--out", str(tmp_path / "test_x.py")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        "grpo-identity export-tests: error: the trl step could not be run for a test pack: returned a dict without "
        "'rank', which the audit reads beside 'step'"
    ]
    assert list(tmp_path.iterdir()) == []


def _pytest(python: str, folder: Path, *options: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRPO_IDENTITY", "PYTEST"))}
    return subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, "."],
        cwd=folder,
        env={**env, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )


#: a shared factor planted in any framework: every loss halved before its backward (as 1/GA applied twice with GA 2),
#: in the tests of the folder this conftest is in, from before their module's step runs to the end of the module
PLANTED = """import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def halved_backward():
    backward = torch.Tensor.backward
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.Tensor, "backward", lambda self, *a, **k: backward(self * 0.5, *a, **k))
        yield
"""
_A = "actor_rollout_ref.actor."


def _with_its_framework(*values: object) -> pytest.ParameterSet:
    """A case on the worker that runs its framework's driver tests (the ``xdist_group`` of the framework): the
    export's audit takes the release's warm child there instead of importing the framework once more."""
    return pytest.param(*values, marks=pytest.mark.xdist_group(str(values[0])))


#: (framework, release, its --set): a configuration whose first step meets its objective on that release
PASSING = [
    _with_its_framework("trl", "1.16.0", ["loss_type=dapo"]),
    _with_its_framework("verl", "0.9.1", ["algorithm.adv_estimator=grpo"]),
    _with_its_framework("openrlhf", "0.11.2", ["algo.advantage.estimator=group_norm"]),
]
#: (framework, release, its --set, the factor): released departures from the objective the exported test finds
FAILING = [
    _with_its_framework("trl", "0.22.2", ["loss_type=dapo", "steps_per_generation=2", "gradient_accumulation_steps=1"],
                        "0.4722"),
    _with_its_framework("verl", "0.7.1", ["algorithm.adv_estimator=grpo", _A + "loss_agg_mode=seq-mean-token-sum-norm",
                                          _A + "loss_scale_factor=12"], "2"),
    _with_its_framework("openrlhf", "0.11.2", ["algo.advantage.estimator=group_norm", "rollout.batch_size=2",
                                               "rollout.micro_batch_size=2", "train.batch_size=16",
                                               "train.micro_batch_size=2"], "2.7"),  # a step, 2 generation batches
]  # fmt: skip


def _export(framework, release, sets, out):
    argv = ["export-tests", framework, "--release", release, "--out", str(out), "--json"]
    return main([*argv, *[a for s in sets for a in ("--set", s)]])


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize("framework, release, sets", PASSING)
def test_an_exported_test_passes_on_its_release_and_fails_on_a_planted_factor(framework, release, sets, tmp_path,
                                                                                capsys):  # fmt: skip
    """One pytest run of the pack twice: as exported (it passes) and beside a conftest that halves every loss
    (it fails, naming the factor); one run, so the framework is imported once."""
    from frameworks._support import env_or_skip  # tests/checks/frameworks (this folder is on the path)

    env = env_or_skip(framework, release)
    clean, planted = tmp_path / "clean", tmp_path / "planted"
    clean.mkdir()
    assert _export(framework, release, sets, clean / f"test_{framework}.py") == 0
    said = json.loads(capsys.readouterr().out)
    assert said["factor"] == pytest.approx(1.0, abs=1e-3) and said["release"] == release
    probe = subprocess.run([env.python, "-c", "import grpo_identity"], capture_output=True, cwd=tmp_path)
    assert probe.returncode != 0  # the file runs where this project cannot be imported
    planted.mkdir()
    (planted / f"test_{framework}_planted.py").write_text((clean / f"test_{framework}.py").read_text())
    (planted / "conftest.py").write_text(PLANTED)
    done = _pytest(env.python, tmp_path, "-rA")
    outcomes = sorted(ln.split(" - ")[0] for ln in done.stdout.splitlines() if ln.startswith(("PASSED ", "FAILED ")))
    assert outcomes == [
        f"FAILED planted/test_{framework}_planted.py::test_the_update_is_the_objective",
        f"PASSED clean/test_{framework}.py::test_the_step_holds_the_probe_answers",
        f"PASSED clean/test_{framework}.py::test_the_update_is_the_objective",
        f"PASSED planted/test_{framework}_planted.py::test_the_step_holds_the_probe_answers",
    ], done.stdout[-3000:]
    assert done.returncode == 1 and "optimizer step 0 is 0.5× its objective" in done.stdout, done.stdout[-2000:]


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize("framework, release, sets, factor", FAILING)
def test_an_exported_test_fails_on_a_release_that_departs_from_its_objective(framework, release, sets, factor,
                                                                               tmp_path, capsys):  # fmt: skip
    from frameworks._support import env_or_skip

    env = env_or_skip(framework, release)
    assert _export(framework, release, sets, tmp_path / f"test_{framework}.py") == 0
    assert f"{json.loads(capsys.readouterr().out)['factor']:.4g}" == factor
    done = _pytest(env.python, tmp_path)
    assert done.returncode == 1 and f"optimizer step 0 is {factor}× its objective" in done.stdout


def test_the_runners_probe_sizes_are_the_drivers():
    from grpo_identity.checks.frameworks import PROMPT_LENGTH, RESPONSE_LENGTH
    from grpo_identity.checks.frameworks.exported import openrlhf, verl

    for runner in (openrlhf, verl):
        assert (runner.WIDTH, runner.PROMPT) == (RESPONSE_LENGTH, PROMPT_LENGTH)


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize(
    "framework, release, sets, words",
    [
        _with_its_framework(
            "trl", "1.16.0", ["num_processes=2"], "writes a one-process test of the step: set num_processes=1"
        ),
        _with_its_framework(
            "openrlhf", "0.10.2", ["algo.advantage.estimator=group_norm"], "openrlhf 0.10.2: no documented objective"
        ),
    ],
)
def test_a_step_that_cannot_be_exported_is_one_line_exit_2_and_nothing_written(
    framework, release, sets, words, tmp_path, capsys
):
    from frameworks._support import env_or_skip

    env_or_skip(framework, release)
    assert _export(framework, release, sets, tmp_path / "test_x.py") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert words in err[-1] and "Traceback" not in "\n".join(err)
    assert list(tmp_path.iterdir()) == []
