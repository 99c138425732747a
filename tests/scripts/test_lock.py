"""The locked environment (scripts/lock.py): the committed lock answers pyproject.toml and constraints.txt, a
dependency added without `make lock` is refused in one line naming what changed, the lock holds the CPU torch
and no CUDA stack, `make setup` installs from it alone, the import check sees a broken import that pip check
does not, and the fresh check's drift report."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")


def _lock_module():
    spec = importlib.util.spec_from_file_location("lock_script", ROOT / "scripts" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


L = _lock_module()


def _copy(tmp_path: Path) -> Path:
    """The lock's inputs and the script, in a folder of their own."""
    for name in ("pyproject.toml", "constraints.txt", "requirements.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "lock.py", tmp_path / "scripts" / "lock.py")
    return tmp_path


def test_the_committed_lock_answers_its_inputs():
    assert L.stale_inputs() == []
    assert L.check(python=(3, 11, 7), machine="x86_64", system="Linux").startswith("requirements.lock is current")


def test_a_dependency_added_without_relocking_is_refused_in_one_line_naming_the_table(tmp_path):
    root = _copy(tmp_path)
    text = (root / "pyproject.toml").read_text()
    (root / "pyproject.toml").write_text(text.replace('trainer = ["torch', 'trainer = ["rich>=13", "torch', 1))
    assert L.stale_inputs(root) == ["optional-dependencies.trainer"]
    res = subprocess.run([sys.executable, str(root / "scripts" / "lock.py"), "check"], capture_output=True, text=True)
    assert res.returncode == 1 and res.stdout == ""
    (line,) = res.stderr.splitlines()  # one line
    assert "requirements.lock is stale: pyproject.toml's optional-dependencies.trainer changed" in line
    assert "run `make lock`" in line


def test_a_new_extra_a_constraint_and_the_build_requirements_are_inputs_too(tmp_path):
    root = _copy(tmp_path)
    text = (root / "pyproject.toml").read_text()
    text = text.replace("[project.optional-dependencies]", '[project.optional-dependencies]\nrich = ["rich"]', 1)
    (root / "pyproject.toml").write_text(text.replace('"wheel"]', '"wheel", "cython"]', 1))
    (root / "constraints.txt").write_text((root / "constraints.txt").read_text() + "numpy<2\n")
    assert L.stale_inputs(root) == ["build-system.requires", "constraints.txt", "optional-dependencies.rich"]
    with pytest.raises(L.LockError, match=r"build-system\.requires, constraints\.txt, pyproject.toml's optional"):
        L.check(root, python=(3, 11, 7), machine="x86_64", system="Linux")


def test_comments_and_order_of_tables_do_not_make_the_lock_stale(tmp_path):
    root = _copy(tmp_path)
    (root / "constraints.txt").write_text("# a new comment\n" + (root / "constraints.txt").read_text())
    assert L.stale_inputs(root) == []


@pytest.mark.parametrize("python", [(3, 12, 1), (3, 11, 4), (3, 10, 14)])
def test_another_python_is_told_which_one_the_lock_is_for_and_how_to_install_without_it(python):
    this = ".".join(map(str, python))
    words = rf"CPython >= 3\.11\.5 \(3\.11\) on Linux x86_64, this is Python {re.escape(this)}.*PYTHON=python3\.11"
    with pytest.raises(L.LockError, match=words):
        L.check(python=python, machine="x86_64", system="Linux")


def test_the_lock_holds_the_cpu_torch_the_tested_frameworks_and_no_cuda_stack():
    from grpo_identity.checks.calls.adapters import TESTED_VERSIONS

    pins = L.pins()
    assert pins["torch"].endswith("+cpu")
    assert pins["trl"] == f"trl=={TESTED_VERSIONS['trl']}" and pins["verl"] == f"verl=={TESTED_VERSIONS['verl']}"
    makefile = (ROOT / "Makefile").read_text()
    transformers = re.search(r"^TRANSFORMERS_VERSION\s*:=\s*(\S+)", makefile, re.M).group(1)
    assert pins["transformers"] == f"transformers=={transformers}"
    cuda = [n for n in pins if n.startswith(("nvidia-", "triton", "vllm", "flash-attn", "cuda-"))]
    assert cuda == []
    every_hash = re.findall(
        r"^([A-Za-z0-9][\w.-]*)==\S+ \\\n((?:    --hash=sha256:\w+(?: \\)?\n)+)",
        (ROOT / "requirements.lock").read_text(),
        re.M,
    )
    assert len(every_hash) == len(pins)  # every package pinned with its hashes


def test_make_setup_installs_from_the_lock_alone():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("$(STAMP):", 1)[1].split("\n\n", 1)[0]
    assert "$(LOCKPY) check" in recipe.splitlines()[1]  # first: a stale lock stops everything
    assert "uv pip sync" in recipe and "--require-hashes" in recipe and "$(LOCK)" in recipe
    assert "--compile-bytecode" in recipe  # nothing else writes bytecode where PYTHONDONTWRITEBYTECODE is set
    assert "--no-deps" in recipe.split("-e .")[0].splitlines()[-1]  # the project itself without dependencies
    assert "pip check" in recipe and "$(LOCKPY) imports" in recipe
    assert not re.search(r"pip install[^\n]*'\.\[", makefile)  # no bare resolution of an extra anywhere


def test_the_import_check_sees_a_broken_lazy_import_that_pip_check_does_not(monkeypatch, tmp_path):
    broken = tmp_path / "lazy_pkg"
    broken.mkdir()
    (broken / "__init__.py").write_text(
        "def __getattr__(name):\n"
        "    try:\n        raise ValueError('Either a revision or a version must be specified.')\n"
        "    except ValueError as e:\n        raise RuntimeError(f'Failed to import {name}') from e\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(L.IMPORTS, "demo", ("json", "lazy_pkg", "lazy_pkg:Trainer", "no_such_module_here"))
    failed = L.check_imports(["demo"])
    assert failed == [
        "[demo] lazy_pkg:Trainer: ValueError: Either a revision or a version must be specified.",
        "[demo] no_such_module_here: ModuleNotFoundError: No module named 'no_such_module_here'",
    ]
    assert L.check_imports(["base"]) == []


def test_every_extra_has_an_import_check():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras) - {"all", "mutate"} <= set(L.IMPORTS)


def test_the_fresh_check_reports_what_todays_index_changes():
    locked = "a==1.0 \\\n    --hash=sha256:x\nb==2.0\nc-d==3\n"
    today = "a==1.1\nC_D==3\ne==0.1\n"
    assert L.drift(locked, today) == ["a 1.0 -> 1.1", "+e 0.1", "-b 2.0"]


def test_what_the_lock_leaves_out_is_an_input_and_absent_from_it(tmp_path):
    assert L.LEFT_OUT and not {L._norm(n) for n in L.LEFT_OUT} & set(L.pins())
    root = _copy(tmp_path)
    script = root / "scripts" / "lock.py"
    assert L.stale_inputs(root) == []  # as committed, the lock answers LEFT_OUT
    text, n = re.subn(r"^LEFT_OUT = \(", 'LEFT_OUT = ("one-more", ', script.read_text(), flags=re.M)
    assert n == 1
    script.write_text(text)
    res = subprocess.run([sys.executable, str(script), "check"], capture_output=True, text=True)
    assert res.returncode == 1 and "scripts/lock.py LEFT_OUT changed" in res.stderr


def test_uv_is_told_to_leave_out_each_left_out_package(monkeypatch, tmp_path):
    seen: list[tuple[list[str], str]] = []

    def run(cmd, what, **kw):
        overrides = cmd[cmd.index("--override") + 1]
        seen.append((cmd, Path(overrides).read_text()))  # the file lives only while uv runs

    monkeypatch.setattr(L, "_uv", lambda: "uv")
    monkeypatch.setattr(L, "_run", run)
    L.compile_lock(tmp_path / "out.txt", exclude_newer=None, wheels=tmp_path)
    ((cmd, overrides),) = seen
    assert cmd[:3] == ["uv", "pip", "compile"]
    dropped = [Requirement(line) for line in overrides.splitlines()]  # an override whose marker never holds drops
    assert [L._norm(r.name) for r in dropped] == [L._norm(n) for n in L.LEFT_OUT]
    assert not any(r.marker is None or r.marker.evaluate() for r in dropped)
