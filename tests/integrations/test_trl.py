"""The TRL callback: a real ``GRPOTrainer`` on a tiny Llama built from a config, launched by
``accelerate`` on two CPU processes (gloo), against a one-process computation on the gathered
batch; the live audit's warning; the config's dial against the one the audit infers."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.integrations.diagnose import read_series
from grpo_identity.integrations.metrics import SolveRateTracker, step_metrics

pytestmark = pytest.mark.frameworks
pytest.importorskip("trl", reason="TRL is not installed (make frameworks)")
pytest.importorskip("accelerate", reason="accelerate is not installed (make frameworks)")

from grpo_identity.integrations.trl import IdentityCallback, dial_for_config  # noqa: E402

RUN = Path(__file__).with_name("trl_run.py")
G = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(out: Path, *args: str, processes: int = 2) -> subprocess.CompletedProcess[str]:
    if processes == 1:
        cmd = [sys.executable, str(RUN), str(out), *args]
    else:
        cmd = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            str(processes),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            str(_free_port()),
            str(RUN),
            str(out),
            *args,
        ]
    temp = out / "temp"  # torch elastic's agent leaves its log folder (torchelastic_*) in TMPDIR: kept here
    temp.mkdir(exist_ok=True)
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(temp)}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def _identity(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k.startswith("identity/")}


def _reference(out: Path, processes: int) -> list[dict]:
    """One process, the gathered batch: each step's rows of rank 0, then rank 1 (accelerate's
    gather order), advantages from the dial TRL's config names, a fresh tracker."""
    by_step: dict[int, list[dict]] = defaultdict(list)
    for rank in range(processes):
        for line in (out / f"rows-{rank}.jsonl").read_text().splitlines():
            row = json.loads(line)
            by_step[row["step"]].append(row)
    tracker, ref = SolveRateTracker(), []
    for step in sorted(by_step):
        rows = by_step[step]
        r = np.array([x["reward"] for x in rows], dtype=np.float32).astype(np.float64)
        prompts = [rows[i]["prompt"] for i in range(0, len(rows), G)]
        ref.append(step_metrics(r, D.advantages(r, G, D.TRL), G, D.TRL, prompts=prompts, tracker=tracker).metrics)
    return ref


@pytest.mark.slow
def test_with_two_accelerate_processes_only_the_main_one_logs_once_per_step_what_one_computes_on_the_gathered_batch(
    tmp_path,
):
    _launch(tmp_path)
    main, other = (json.loads((tmp_path / f"log-{r}.json").read_text()) for r in (0, 1))
    assert (main["world_size"], main["backend"], main["is_main_process"], other["is_main_process"]) == (
        2,
        "gloo",
        True,
        False,
    )
    steps = [e for e in main["log_history"] if "loss" in e]
    assert [e["step"] for e in steps] == [1, 2, 3]
    assert all(_identity(e) == {} for e in other["log_history"])
    ref = _reference(tmp_path, 2)
    assert len(ref) == len(steps)
    for logged, want in zip(steps, ref):
        got = _identity(logged)
        assert got.keys() == {k for k, v in want.items() if np.isfinite(v)}
        assert got["identity/groups"] == 2  # one group from each process
        for k, v in want.items():
            # TRL's advantages are float32; the reference's are float64
            assert got[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
    # the callback's own JSONL holds the same values, one line per step, and diagnose reads it
    lines = [json.loads(x) for x in (tmp_path / "identity.jsonl").read_text().splitlines()]
    assert [x.pop("step") for x in lines] == [1, 2, 3] and lines == [_identity(e) for e in steps]
    assert read_series(tmp_path / "identity.jsonl")["silent_frac"] == [
        (float(e["step"]), e["identity/silent_frac"]) for e in steps
    ]
    # the silent fraction by hand, from the rows each process scored
    rows = [json.loads(x) for r in (0, 1) for x in (tmp_path / f"rows-{r}.jsonl").read_text().splitlines()]
    groups = defaultdict(list)
    for i, x in enumerate(sorted(rows, key=lambda x: x["step"])):
        groups[(x["step"], x["prompt"], i // G)].append(x["reward"])
    by_step = defaultdict(list)
    for (step, _, _), rs in groups.items():
        by_step[step].append(len(set(rs)) == 1)
    assert [e["identity/silent_frac"] for e in steps] == [float(np.mean(by_step[s])) for s in sorted(by_step)]


@pytest.mark.slow
def test_a_silent_group_of_non_binary_rewards_left_with_non_zero_advantages_is_warned_about_once(tmp_path):
    res = _launch(tmp_path, "silent07", "8", processes=1)
    log = json.loads((tmp_path / "log-0.json").read_text())["log_history"]
    steps = [e for e in log if "loss" in e]
    # every group is silent; TRL's float32 mean of eight 0.7s is not 0.7, and (r − mean)/(std + 1e-4) ≈ 6e-4
    assert all(e["identity/silent_frac"] == 1.0 and e["identity/departures"] == 1.0 for e in steps)
    assert all(5e-4 < e["identity/adv_dev_max"] < 7e-4 for e in steps)
    assert res.stderr.count("leave the identity") == 1


class _StubTrainer:
    """What the callback reads of a GRPOTrainer, for the bookkeeping tests."""

    def __init__(self, main: bool = True) -> None:
        self.args = SimpleNamespace(scale_rewards="group", multi_objective_aggregation="sum_then_normalize")
        self.accelerator = SimpleNamespace(is_main_process=main)
        self.num_generations, self.reward_func_names = G, ["f"]
        self.reward_weights = __import__("torch").ones(1)
        self._metrics = {"train": defaultdict(list)}
        self._buffered_inputs = None

    def generate(self, rewards: list[float]) -> None:
        r = np.array(rewards)
        self._logs = {
            "rewards": {"f": list(r)},
            "advantages": list(D.advantages(r, G, D.TRL)),
            "prompt": ["p"] * len(r),
        }
        self._buffered_inputs = [object()]


def test_the_callback_appends_each_generation_batch_once_and_only_on_the_main_process():
    state, control = SimpleNamespace(global_step=1), object()
    t = _StubTrainer()
    cb = IdentityCallback(t)
    cb.on_step_end(None, state, control)  # before any generation: nothing
    t.generate([1, 0, 0, 0])
    cb.on_step_end(None, state, control)
    cb.on_step_end(None, state, control)  # same generation batch (steps_per_generation > 1)
    assert t._metrics["train"]["identity/silent_frac"] == [0.0]
    t.generate([1, 1, 1, 1])
    cb.on_step_end(None, state, control)
    assert t._metrics["train"]["identity/silent_frac"] == [0.0, 1.0]
    other = _StubTrainer(main=False)
    other.generate([1, 0, 0, 0])
    IdentityCallback(other).on_step_end(None, state, control)
    assert dict(other._metrics["train"]) == {}


def test_the_callback_weighs_the_reward_functions_as_trl_does_and_leaves_unscorable_groups_out():
    t = _StubTrainer()
    t.reward_func_names, t.reward_weights = ["f", "g"], __import__("torch").tensor([1.0, 0.5])
    t.generate([1, 0, 0, 0])
    t._logs["rewards"] = {"f": [0.0, 0.0, 0.0, 0.0, np.nan, 0, 0, 0], "g": [2.0, 0.0, 0.0, 0.0, np.nan, 0, 0, 0]}
    t._logs["advantages"] += [0.0] * 4
    t._logs["prompt"] += ["q"] * 4
    cb = IdentityCallback(t)
    cb.on_step_end(None, SimpleNamespace(global_step=1), None)
    assert cb.last is not None and cb.last.metrics["identity/groups"] == 1.0  # the group with a NaN row is left out
    assert cb.last.metrics["identity/departures"] == 0.0  # 1·0 + 0.5·2 = 1: the rewards the advantages came from


def test_a_departure_is_warned_about_once_on_the_grpo_identity_logger(caplog):
    t = _StubTrainer()
    cb = IdentityCallback(t, dial=D.GRPO)  # TRL's advantages are not the paper's GRPO: Bessel's factor
    with caplog.at_level(logging.WARNING, logger="grpo_identity"):
        for _ in range(2):
            t.generate([1, 0, 0, 0])
            cb.on_step_end(None, SimpleNamespace(global_step=1), None)
    assert len(caplog.records) == 1 and "leave the identity of grpo" in caplog.records[0].message
    assert t._metrics["train"]["identity/departures"] == [1.0, 1.0]


@pytest.mark.slow
@pytest.mark.parametrize("scale", ["group", "none", "batch"])
def test_the_dial_of_a_grpo_config_is_the_one_the_audit_infers_from_the_real_trainer(scale):
    from grpo_identity.checks import infer_dial
    from grpo_identity.checks.calls import adapters

    inferred = infer_dial(adapters.build(f"trl:scale_rewards={scale}"))
    config = dial_for_config(SimpleNamespace(scale_rewards=scale, multi_objective_aggregation="sum_then_normalize"))
    assert config is not None and inferred.dial() is not None
    got, want = inferred.dial().params(), config.params()
    assert got.pop("eps") == pytest.approx(want.pop("eps"), rel=0.05)  # ε is estimated from float32 probes
    assert got == want


def test_a_config_off_the_dial_has_no_dial_and_bad_options_are_refused(tmp_path):
    assert (
        dial_for_config(SimpleNamespace(scale_rewards="group", multi_objective_aggregation="normalize_then_sum"))
        is None
    )
    with pytest.raises(ValueError, match="eps must be in"):
        IdentityCallback(_StubTrainer(), eps=1.5)
    with pytest.raises(ValueError, match="folder .* does not exist"):
        IdentityCallback(_StubTrainer(), log_file=tmp_path / "no" / "identity.jsonl")


def test_the_log_file_gets_one_line_per_generation_batch_from_the_main_process_only(tmp_path):
    for main, name in ((True, "main.jsonl"), (False, "other.jsonl")):
        t = _StubTrainer(main=main)
        cb = IdentityCallback(t, log_file=tmp_path / name)
        for step, rewards in ((1, [1, 0, 0, 0]), (2, [1, 1, 1, 1])):
            t.generate(rewards)
            cb.on_step_end(None, SimpleNamespace(global_step=step), None)
            cb.on_step_end(None, SimpleNamespace(global_step=step), None)
    lines = [json.loads(x) for x in (tmp_path / "main.jsonl").read_text().splitlines()]
    assert [(x["step"], x["identity/silent_frac"]) for x in lines] == [(1, 0.0), (2, 1.0)]
    assert not (tmp_path / "other.jsonl").exists()
