"""Bad input to any subcommand: exit 2, exactly one line on stderr naming what was wrong (the
option as typed), no traceback, nothing on stdout, and nothing written (the --out folder is not
created, or left empty).  Run in-process: a subprocess costs seconds each."""

from __future__ import annotations

import os
import sys

import pytest

from grpo_identity import data
from grpo_identity.app.cli import main

CURVE = str(data.path(data.DAPO_CURVE))
#: commands that write into an --out folder: each case gets one (unless it sets its own) to check
WRITERS = {"train", "realdata", "dapo-fit", "verify", "render"}

# (argv, a substring the one line must hold); {tmp} {file} {dir} {empty} {rates} {bad} are filled in
CASES = [
    # the command line itself
    (["no-such-command"], "invalid choice"),
    (["closed-forms", "--bogus"], "unrecognized arguments: --bogus"),
    (["train"], "required: MODEL"),
    # closed-forms
    (["closed-forms", "--G", "1"], "argument --G: must be an integer from 2 to 1,000,000, got 1"),
    (["closed-forms", "--G", "-5"], "--G"),
    (["closed-forms", "--G", "1000001"], "--G: must be an integer from 2 to 1,000,000, got 1000001"),
    (["closed-forms", "--G", "8.5"], "--G"),
    (["closed-forms", "--G", "ten"], "got 'ten'"),
    (["closed-forms", "--p", "nan"], "argument --p: must be a finite number in [0, 1], got nan"),
    (["closed-forms", "--p", "inf"], "--p"),
    (["closed-forms", "--p", "2"], "--p: must be a finite number in [0, 1], got 2"),
    (["closed-forms", "--p", "-0.1"], "--p"),
    (["closed-forms", "--table", "nope"], "invalid choice"),
    (["closed-forms", "--p", "1e-6"], "--p 1e-06: no G <= 10000000 reaches fidelity 0.99 at p=1e-06 (a --p further"),
    (["closed-forms", "--p", "1e-320"], "(a --p further from 0 and 1)"),
    # train bernoulli: options named as typed, sizes over the memory budget, files
    (["train", "bernoulli", "--M", "-3"], "--M must be an integer >= 4, got -3"),
    (["train", "bernoulli", "--num-prompts", "2"], "--num-prompts must be"),
    (["train", "bernoulli", "--G", "1"], "--G must be an integer >= 2, got 1"),
    (["train", "bernoulli", "--group-size=1"], "--group-size must be"),
    (["train", "bernoulli", "--G", "1000000000"], "over the budget of 16 GiB: lower --M or --G"),
    (["train", "bernoulli", "--M", "100000000"], "lower --M or --G"),
    (["train", "bernoulli", "--max-draws", "1000000000"], "--max-draws"),
    (["train", "bernoulli", "--steps", "0"], "--steps must be"),
    (["train", "bernoulli", "--steps", "100000000"], "--steps must be an integer from 1 to 1,000,000, got 100000000"),
    (["train", "bernoulli", "--mass-draws", "1000000000000"], "--mass-draws must be an integer from 1 to 100,000"),
    (["train", "bernoulli", "--seed", str(10**30)], "--seed must be an integer from 0 to 4,294,967,295"),
    (["train", "bernoulli", "--lr", "1e308"], "--lr must be a finite number in (0, 100], got 1e+308"),
    (["train", "bernoulli", "--lr", "inf"], "--lr must be a finite number in (0, 100], got inf"),
    (["train", "bernoulli", "--lr", "nan"], "--lr"),
    (["train", "bernoulli", "--lr", "-1"], "--lr"),
    (["train", "bernoulli", "--lr", "fast"], "argument --lr: invalid float value"),
    (["train", "bernoulli", "--max-draws", "0"], "--max-draws must be"),
    (["train", "bernoulli", "--clip-low", "0.9", "--clip-high", "0.5"], "--clip-low < --clip-high"),
    (["train", "bernoulli", "--clip-low", "nan"], "--clip-low"),
    (["train", "bernoulli", "--solve-rates", "{tmp}/absent.csv"], "absent.csv"),
    (["train", "bernoulli", "--solve-rates", "{dir}"], "is not a file"),
    (["train", "bernoulli", "--solve-rates", "{empty}"], "empty.csv"),
    (
        ["train", "bernoulli", "--out", "/dev/null/x"],
        "--out /dev/null/x: cannot create the folder (/dev/null is not a folder)",
    ),
    (["train", "bernoulli", "--out", "{file}"], "is a file, not a folder"),
    (["train", "bernoulli", "--out", "{file}/sub"], "cannot create the folder"),
    # train lm
    (["train", "lm", "--G", "1"], "--G must be an integer >= 2, got 1"),
    (["train", "lm", "--group-size", "1"], "--group-size must be"),
    (["train", "lm", "--G", "1000000000"], "over the budget of 16 GiB"),
    (["train", "lm", "--n-embd", "100000", "--n-head", "1"], "--n-embd or --n-layer"),
    (["train", "lm", "--steps", "-1"], "--steps must be"),
    (["train", "lm", "--lr", "nan"], "--lr must be a finite number > 0"),
    (["train", "lm", "--lr", "inf"], "--lr"),
    (["train", "lm", "--temperature", "0"], "--temperature"),
    (["train", "lm", "--temperature", "1e-300"], "--temperature must be at least 0.001, got 1e-300"),
    (["train", "lm", "--threads", "100000"], "--threads must be at most 1,024, got 100000"),
    (["train", "lm", "--steps", "100000000"], "--steps must be at most 1,000,000"),
    (["train", "lm", "--inner-steps", "1000000000"], "--inner-steps must be at most 1,000"),
    (["train", "lm", "--lr", "1e300"], "--lr must be at most 100, got 1e+300"),
    (["train", "lm", "--time-budget", "1e300"], "--time-budget must be at most 10,000,000"),
    (["train", "lm", "--seed", str(10**30)], "--seed must be at most 4,294,967,295"),
    (["train", "lm", "--n-head", "3"], "--n-head must divide --n-embd"),
    (["train", "lm", "--mode", "nope"], "invalid choice"),
    (["train", "lm", "--config", "huge"], "invalid choice"),
    (["train", "lm", "--difficulty-weights", "1,x"], "--difficulty-weights"),
    (["train", "lm", "--difficulty-weights", "1,2"], "--difficulty-weights must be 3 numbers"),
    (["train", "lm", "--out", "/dev/null/x"], "--out /dev/null/x"),
    (["train", "lm", "--out", "{file}"], "is a file, not a folder"),
    # realdata
    (["realdata", "{rates}", "--rollouts", "0"], "argument --rollouts: must be an integer from 1 to 10,000, got 0"),
    (["realdata", "{rates}", "--rollouts", "-1"], "--rollouts"),
    (["realdata", "{rates}", "--rollouts", "100000"], "--rollouts"),
    (["realdata", "{tmp}/absent.csv"], "absent.csv"),
    (["realdata", "{dir}"], "is not a file"),
    (["realdata", "{empty}"], "empty.csv"),
    (["realdata", "{bad}"], "error:"),
    (["realdata", ""], "the solve-rate file's path is empty"),
    (["realdata", "{tmp}/overflow.csv"], "overflow.csv: the count column sums to inf, more than 1e+15 problems"),
    (["realdata", "{tmp}/bigint.jsonl"], "bigint.jsonl line 1: llama8b_solve_rate is too large for a float"),
    (["realdata", "{tmp}/digits.jsonl"], "digits.jsonl line 1 is not JSON that can be read (Exceeds the limit"),
    (["realdata", "{tmp}/deep.jsonl"], "deep.jsonl line 1 is not JSON that can be read (nested too deeply)"),
    (
        ["realdata", "{tmp}/huge.csv"],
        "huge.csv holds 536,870,913 bytes; a CSV or JSONL file of solve rates is read up to",
    ),
    (["realdata", "{rates}", "--out", "/dev/null/x"], "--out /dev/null/x"),
    (["realdata", "{rates}", "--out", "{file}"], "is a file, not a folder"),
    # dapo-fit
    (
        ["dapo-fit", CURVE, "--bootstrap", "1000000"],
        "argument --bootstrap: must be an integer from 0 to 10,000, got 1000000",
    ),
    (["dapo-fit", CURVE, "--bootstrap", "-1"], "--bootstrap"),
    (["dapo-fit", CURVE, "--seed", "-1"], "--seed"),
    (["dapo-fit", CURVE, "--seed", str(2**32)], "--seed: must be an integer from 0 to 4,294,967,295"),
    (["dapo-fit", "{tmp}/steps.csv"], "steps.csv: need a step of at most 1e+12 in size and a fraction in [0, 1]"),
    (["dapo-fit", "{tmp}/absent.csv"], "absent.csv"),
    (["dapo-fit", "{dir}"], "error:"),
    (["dapo-fit", "{empty}"], "empty.csv"),
    (["dapo-fit", CURVE, "--solve-rates", "{tmp}/absent.csv"], "absent.csv"),
    (["dapo-fit", CURVE, "--out", "/dev/null/x"], "--out /dev/null/x"),
    (["dapo-fit", CURVE, "--out", "{file}"], "is a file, not a folder"),
    # prove, audit, verify, render
    (["prove", "-k", "no-such-theorem"], "no theorem matches"),
    (["prove", "-k"], "expected one argument"),
    (["audit", "nosuch"], "nosuch"),
    (["audit", "{tmp}/absent.py:advantages"], "no such file"),
    (["audit", "{dir}:advantages"], "is a folder"),
    (["audit", "grpo", "--max-examples", "0"], "--max-examples"),
    (["audit", "grpo", "--timeout", "0"], "--timeout"),
    (["audit", "grpo", "--timeout", "nan"], "--timeout"),
    (["audit", "grpo", "--expect", "nope"], "nope"),
    (["audit", "grpo", "--kind", "nope"], "invalid choice"),
    (["audit", "grpo", "--call", "fn(R)"], "--call applies to your functions (FILE.py:FUNCTION, MODULE:FUNCTION)"),
    (["verify", "--max-examples", "0"], "--max-examples"),
    (["verify", "--dapo-curve", "{tmp}/absent.csv"], "--dapo-curve"),
    (["verify", "--solve-rates", "{tmp}/absent.csv"], "--solve-rates"),
    (["verify", "--out", "/dev/null/x"], "--out /dev/null/x"),
    (["verify", "--out", "{file}"], "is a file, not a folder"),
    (["verify", "--out", ""], "--out is empty: name a folder"),
    # diagnose: a log is never overwritten, each step a number
    (["diagnose", "{tmp}/log/m.jsonl", "--out", "{tmp}/log/m.jsonl"], "is not an .html file"),
    (["diagnose", ""], "LOGDIR is empty"),
    (["diagnose", "{tmp}/fifo"], "/fifo is not a folder or a regular file"),
    (
        ["diagnose", "{tmp}/log", "--group-size", "-4", "--out", "{tmp}/p.html"],
        "--group-size must be an integer from 2",
    ),
    (["diagnose", "{tmp}/log", "--eps", "1e-300", "--out", "{tmp}/p.html"], "--eps must be in [1e-06, 1), got 1e-300"),
    (["diagnose", "{tmp}/steps/nan.jsonl", "--out", "{tmp}/p.html"], 'nan.jsonl:1: "step" must be a finite number'),
    (
        ["diagnose", "{tmp}/steps/bool.jsonl", "--out", "{tmp}/p.html"],
        "must be a finite number of at most 9,007,199,254,740,992, got True",
    ),
    (["diagnose", "{tmp}/steps/deep.jsonl", "--out", "{tmp}/p.html"], "deep.jsonl:1: JSON nested too deeply to read"),
    (["diagnose", "{tmp}/state", "--out", "{tmp}/p.html"], 'trainer_state.json: log_history[0]: "step" must be'),
    # audit, matrix: lists and grids bounded, a Ray address that answers nothing refused at once
    (
        ["audit", "trl", "--releases", ",".join(f"0.{i}.0" for i in range(60))],
        "--releases names 60 releases, at most 50",
    ),
    (["matrix", "{tmp}/grid.yaml", "--out", "{tmp}/out", "--ray", "127.0.0.1:1"], "--ray 127.0.0.1:1: nothing answers"),
    (
        ["matrix", "{tmp}/big.yaml", "--out", "{tmp}/out"],
        "options.max-examples: max-examples must be an integer from 1",
    ),
    # export-tests: the file's folder is checked before the audit's work
    (["export-tests", "trl", "--out", "{tmp}/absent/test_trl.py"], "/absent does not exist"),
    (["render", "--out", "/dev/null/x"], "--out /dev/null/x"),
    (["render", "--out", "{file}"], "is a file, not a folder"),
    (["render", "--notebooks", "{tmp}/absent"], "--notebooks"),
    (["render", "--notebooks", "{dir}"], "no notebook sources"),
    (["render", "--notebooks", ""], "--notebooks is empty"),
    (["verify", "--solve-rates", "{bad}"], "--solve-rates: bad.csv line 2: llama8b_solve_rate must be numeric"),
    (["verify", "--dapo-curve", "{tmp}/ones.csv"], "--dapo-curve: the plateau 1 must lie between"),
]


@pytest.fixture
def paths(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "rates.csv").write_text("llama8b_solve_rate\n0\n0.5\n1\n")
    (tmp_path / "bad.csv").write_text("llama8b_solve_rate\nabc\n")
    (tmp_path / "overflow.csv").write_text("solve_rate,count\n0.5,1e308\n0.2,1e308\n")
    (tmp_path / "bigint.jsonl").write_text('{"llama8b_solve_rate": ' + "1" * 400 + "}\n")
    (tmp_path / "digits.jsonl").write_text('{"llama8b_solve_rate": ' + "1" * 5000 + "}\n")
    (tmp_path / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with open(tmp_path / "huge.csv", "wb") as fh:  # sparse: no disk
        fh.truncate(512 * 2**20 + 1)
    (tmp_path / "steps.csv").write_text("step,allcorrect_fraction\n-1e308,0\n1e307,0.1\n2e307,0.2\n3e307,0.3\n")
    (tmp_path / "ones.csv").write_text("step,allcorrect_fraction\n" + "".join(f"{i},1.0\n" for i in range(1, 13)))
    (tmp_path / "grid.yaml").write_text("audits:\n  - target: grpo\n")
    (tmp_path / "big.yaml").write_text("audits:\n  - target: grpo\n    options: {max-examples: 99999999}\n")
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "m.jsonl").write_text('{"step": 1, "identity/silent_frac": 0.5}\n')
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "nan.jsonl").write_text('{"step": NaN, "identity/silent_frac": 0.5}\n')
    (tmp_path / "steps" / "bool.jsonl").write_text('{"step": true, "identity/silent_frac": 0.5}\n')
    (tmp_path / "steps" / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "trainer_state.json").write_text('{"log_history": [{"step": [1]}]}')
    return {
        "tmp": tmp_path,
        "file": tmp_path / "afile",
        "dir": tmp_path / "adir",
        "empty": tmp_path / "empty.csv",
        "rates": tmp_path / "rates.csv",
        "bad": tmp_path / "bad.csv",
    }


def run_bad(argv, paths, capsys):
    """Run ``argv`` (placeholders filled, an --out added for writers); return (code, stderr, stdout, out folder)."""
    argv = [a.format(**paths) for a in argv]
    out = paths["tmp"] / "out"
    if argv and argv[0] in WRITERS and "--out" not in argv and len(argv) > 1:
        argv = [*argv, "--out", str(out)]
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err, captured.out, out


def assert_one_line_and_nothing_written(code, err, stdout, out, needle):
    assert code == 2, err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err and "np.float" not in err and "np.int" not in err
    assert needle in err, err
    assert stdout == ""
    assert not out.exists() or not any(out.iterdir()), sorted(p.name for p in out.iterdir())


@pytest.mark.parametrize(("argv", "needle"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(argv, needle, paths, capsys):
    assert_one_line_and_nothing_written(*run_bad(argv, paths, capsys), needle)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
@pytest.mark.parametrize(
    "argv",
    [["train", "bernoulli"], ["train", "lm"], ["realdata", "{rates}"], ["dapo-fit", CURVE], ["render"], ["verify"]],
)
def test_an_out_folder_in_a_read_only_folder_is_refused_before_the_work(argv, paths, capsys):
    ro = paths["tmp"] / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert_one_line_and_nothing_written(
            *run_bad([*argv, "--out", str(ro / "out")], paths, capsys), "cannot create the folder"
        )
    finally:
        ro.chmod(0o755)


#: (argv, the module made unimportable, the extra the line must name)
MISSING = [
    (["train", "bernoulli", "--M", "10", "--steps", "1"], "torch", "trainer"),
    (["train", "bernoulli", "--M", "10", "--steps", "1", "--out", "{tmp}/out"], "matplotlib", "notebooks"),
    (["train", "lm", "--steps", "1"], "torch", "trainer"),
    (["train", "lm", "--steps", "1"], "transformers", "trainer"),
    (["train", "lm", "--steps", "1", "--out", "{tmp}/out"], "matplotlib", "notebooks"),
    (["realdata", "{rates}", "--out", "{tmp}/out"], "matplotlib", "notebooks"),
    (["dapo-fit", CURVE, "--bootstrap", "0", "--out", "{tmp}/out"], "matplotlib", "notebooks"),
    (["render", "--no-execute", "--out", "{tmp}/out"], "jupytext", "notebooks"),
    (["render", "--no-execute", "--out", "{tmp}/out"], "nbformat", "notebooks"),
]


@pytest.mark.parametrize(
    ("argv", "module", "extra"), MISSING, ids=[f"{' '.join(a[:2])} without {m}" for a, m, _ in MISSING]
)
def test_a_missing_optional_package_is_one_line_naming_its_extra_before_any_work(
    argv, module, extra, paths, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    needle = f"this needs {module}: pip install 'grpo-identity[{extra}]'"
    assert_one_line_and_nothing_written(*run_bad(argv, paths, capsys), needle)


def test_no_command_prints_the_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out
