"""Release environments (``checks.calls.releases``): where they live and what names them, the pins each release
needs, the install commands, the ways of resolving (as of the release's day, pins exempt, today's index),
the upload time read from the index, an environment that runs the project's code and nothing else of the
caller's, a rebuild when the recipe changes, a build that fails leaving nothing behind, the cache listed
and pruned; and, against the real index, TRL 0.22.0 resolved as of its day and an audit from a second
venv that finds the same environment."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from grpo_identity.checks.calls import releases as R
from grpo_identity.checks.frameworks import AdapterError

ROOT = Path(__file__).resolve().parents[2]


def test_release_environments_live_where_the_variable_says_under_a_name_with_their_key(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_IDENTITY_ENVS", str(tmp_path))
    env = R.env_dir("trl", "0.22.0", "2025-08-29T20:20:02Z")
    assert env.parent == tmp_path and env.name == f"trl-0.22.0-{R.env_key('trl', '0.22.0', '2025-08-29T20:20:02Z')}"
    assert R.env_dir("trl", "0.22.0", None) != env  # today's index is another resolution: another folder
    monkeypatch.delenv("GRPO_IDENTITY_ENVS")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert R.env_root().parts[-3:] == (".cache", "grpo-identity", "envs")


def test_the_key_changes_with_the_pins_and_the_project_requirements(monkeypatch):
    before = R.env_key("trl", "9.9.9", "2025-01-01T00:00:00Z")
    monkeypatch.setitem(R.RELEASE_PINS, ("trl", "9.0", "10.0"), ("transformers<4",))
    pinned = R.env_key("trl", "9.9.9", "2025-01-01T00:00:00Z")
    monkeypatch.setattr(R, "project_requirements", lambda: ["numpy>=9"])
    assert len({before, pinned, R.env_key("trl", "9.9.9", "2025-01-01T00:00:00Z")}) == 3


def test_old_trl_releases_get_the_transformers_they_need_and_new_ones_none():
    assert R.release_pins("trl", "0.22.2") == ["transformers>=4.56.1,<4.57"]
    assert R.release_pins("trl", "0.29.1") == ["transformers<5"]
    assert R.release_pins("trl", "1.16.0") == []
    assert "cachetools" in R.release_pins("verl", "0.6.0") and "transformers<5" in R.release_pins("verl", "0.6.0")
    assert "transformers<5" not in R.release_pins("verl", "0.9.1")


@pytest.mark.parametrize(
    "framework, release, words",
    [
        ("trl", "0.22; rm -rf /", "is no version number"),
        ("areal", "1.0; rm", "is no version number"),
        ("trl", "", "is no version number"),
        ("trl", "-1.0", "is no version number"),
        ("grpo", "0.11.2", "--release applies to"),
        (
            "trl",
            "0.15.2",
            r"trl 0.15.2 is older than the driver audits: it runs trl 0.16.0 and later \(the first with ",
        ),
    ],
)
def test_a_bad_release_request_is_refused_before_anything_is_installed(
    framework, release, words, monkeypatch, tmp_path
):
    monkeypatch.setenv("GRPO_IDENTITY_ENVS", str(tmp_path))
    with pytest.raises(AdapterError, match=words):
        R.ensure(framework, release)
    assert list(tmp_path.iterdir()) == []


def test_the_install_commands_carry_the_release_its_pins_torch_the_projects_own_requirements_and_pytest(monkeypatch):
    monkeypatch.setitem(R.NO_DEPS, ("demo", "0.0", "2.0"), ("torchdata",))
    monkeypatch.setitem(R.RELEASE_PINS, ("demo", "0.0", "99"), ("ray",))
    ours = R.project_requirements()
    assert any(r.startswith("numpy") for r in ours) and not any("pytest" in r for r in ours)  # no extra's
    first, second = R.install_commands("demo", "1.0", ["inst"], "c.txt")
    assert first == ["inst", "-c", "c.txt", "--no-deps", "demo==1.0", "torchdata"]
    assert second == ["inst", "-c", "c.txt", R.TORCH_PIN, "ray", *ours, "pytest>=8"]  # pytest: exported tests
    # past the range: one command, with dependencies
    (one,) = R.install_commands("demo", "2.0", ["inst"], "c.txt")
    assert one == ["inst", "-c", "c.txt", R.TORCH_PIN, "demo==2.0", "ray", *ours, "pytest>=8"]


def test_areal_goes_in_without_its_declared_requirements_then_what_its_actor_imports():
    assert R.no_deps("areal", "1.0.4") == []
    first, second = R.install_commands("areal", "1.0.4", ["inst"], "c.txt")
    assert first[-2:] == ["--no-deps", "areal==1.0.4"] and R.TORCH_PIN not in first
    assert (
        R.TORCH_PIN in second and "omegaconf==2.4.0.dev2" in second and not any(p.startswith("areal") for p in second)
    )
    assert not any(
        p.split("=")[0].split("<")[0] in ("transformers", "vllm", "sglang", "flash-attn")
        for p in second[second.index(R.TORCH_PIN) + 1 :]
    )


def test_a_release_is_resolved_as_of_the_end_of_its_upload_day_then_with_its_pins_exempt_then_today():
    strict, exempt, today = R.resolution_plans("trl", "0.22.0", "2025-08-29T20:20:02.384386Z", uv=True)
    assert strict.options() == ["--exclude-newer", "2025-08-30T00:00:00Z", "--exclude-newer-package",
                                f"torch={R.FAR_FUTURE}"]  # fmt: skip
    assert strict.note is None
    assert exempt.as_of == strict.as_of and "transformers=" + R.FAR_FUTURE in exempt.exempt
    assert "except torch, transformers" in exempt.note
    assert today.options() == [] and "could not be resolved as of 2025-08-30" in today.note


def test_without_an_upload_date_or_without_uv_the_one_plan_is_todays_index_and_says_why():
    (offline,) = R.resolution_plans("trl", "0.22.0", None, uv=True)
    assert offline.as_of is None and "upload date of trl 0.22.0 could not be read" in offline.note
    (pip,) = R.resolution_plans("trl", "0.22.0", "2025-08-29T20:20:02Z", uv=False)
    assert pip.method == "today's index (pip)" and "pip install 'grpo-identity[releases]'" in pip.note


@contextlib.contextmanager
def _index(monkeypatch, tmp_path, files):
    """A package index on the loopback whose JSON API (PEP 691) lists ``files`` for every project; yields the
    paths it was asked for, with the Accept header of each request."""
    asked = []

    class Index(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append((self.path, self.headers.get("Accept")))
            body = json.dumps({"files": files}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("GRPO_IDENTITY_ENVS", str(tmp_path))
    monkeypatch.setenv("GRPO_IDENTITY_SIMPLE_INDEX", f"http://127.0.0.1:{server.server_address[1]}/simple")
    try:
        yield asked
    finally:
        server.shutdown()
        server.server_close()


def test_the_upload_time_is_the_releases_first_file_read_from_the_indexs_json_api_and_cached(monkeypatch, tmp_path):
    files = [
        {"filename": "trl-0.22.0-py3-none-any.whl", "upload-time": "2025-08-29T20:20:02Z"},
        {"filename": "trl-0.22.0.tar.gz", "upload-time": "2025-08-29T20:20:04Z"},
        {"filename": "trl-0.22.0.1-py3-none-any.whl", "upload-time": "2020-01-01T00:00:00Z"},  # another release
        {"filename": "ms_swift-4.6.0-py3-none-any.whl", "upload-time": "2026-10-13T08:00:00Z"},  # a wheel's name: _
    ]
    with _index(monkeypatch, tmp_path, files) as asked:
        assert R.upload_time("trl", "0.22.0") == "2025-08-29T20:20:02Z"
        assert R.upload_time("trl", "0.22.0") == "2025-08-29T20:20:02Z"  # from the cache
        assert R.upload_time("trl", "7.7.7") is None  # no such file
        assert R.upload_time("ms-swift", "4.6.0") == "2026-10-13T08:00:00Z"  # the project's name has a hyphen
    assert asked[0] == ("/simple/trl/", "application/vnd.pypi.simple.v1+json") and len(asked) == 3
    monkeypatch.setenv("GRPO_IDENTITY_SIMPLE_INDEX", "http://127.0.0.1:9/nothing")  # nothing listens there
    assert R.upload_time("trl", "6.6.6") is None


_LISTED = [
    {"filename": "trl-1.16.0-py3-none-any.whl", "upload-time": "2026-10-01T10:00:00Z"},
    {"filename": "trl-1.9.0.tar.gz", "upload-time": "2026-03-01T10:00:00Z"},
    {"filename": "trl-1.15.0-py3-none-any.whl", "upload-time": "2026-09-01T10:00:00Z"},
    {"filename": "trl-0.22.0-py3-none-any.whl", "upload-time": "2025-08-29T20:20:02Z"},
    {"filename": "trl-latest.tar.gz"},  # no version: ignored
]


def test_a_release_the_index_does_not_list_is_refused_in_one_line_before_anything_is_made(monkeypatch, tmp_path):
    with _index(monkeypatch, tmp_path, _LISTED), pytest.raises(AdapterError) as exc:
        R.ensure("trl", "99.1.0")
    index = os.environ.get("GRPO_IDENTITY_SIMPLE_INDEX")
    assert str(exc.value) == (
        f"trl 99.1.0 is not on the index ({index}): its newest releases are 1.16.0, 1.15.0, 1.9.0; set --release to "
        "one of its releases"
    )
    assert list(tmp_path.iterdir()) == []  # no folder, no lock, nothing cached


def test_a_release_spelt_otherwise_is_built_once_as_the_indexs_release(monkeypatch, tmp_path):
    built = []

    def build(env, fw, rel, uploaded, uv):
        built.append((env.name, rel, uploaded))
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        record = {"framework": fw, "release": rel, "method": "test"}
        (env / "environment.json").write_text(json.dumps(record))
        return record

    monkeypatch.setattr(R, "_build", build)
    with _index(monkeypatch, tmp_path, _LISTED), open(os.devnull, "w") as quiet:
        assert [R.listed("trl", r) for r in ("1.16", "1.16.0", "1.15.0.0", "v1.9")] == [
            "1.16.0",
            "1.16.0",
            "1.15.0",
            "1.9.0",
        ]
        first, again = R.ensure("trl", "1.16", log=quiet), R.ensure("trl", "1.16.0", log=quiet)
    env = R.env_dir("trl", "1.16.0", "2026-10-01T10:00:00Z")
    assert built == [(env.name, "1.16.0", "2026-10-01T10:00:00Z")]  # made as of the release's day, once
    assert first.release == again.release == "1.16.0" and first.python == again.python
    monkeypatch.setenv("GRPO_IDENTITY_SIMPLE_INDEX", "http://127.0.0.1:9/nothing")  # offline: as the user spelt it
    assert R.listed("trl", "1.16") == "1.16"


def test_a_release_for_another_python_is_named_with_the_python_it_needs(monkeypatch, tmp_path):
    pytest.importorskip("packaging")
    here = ".".join(map(str, sys.version_info[:3]))
    files = [
        {"filename": "demo-2.0-py3-none-any.whl", "requires-python": ">=3.99"},
        {"filename": "demo-2.0.tar.gz", "requires-python": ">= 3.99"},  # the same, spelt otherwise: named once
        {"filename": "demo-1.0-py3-none-any.whl", "requires-python": ">=3.99"},  # one file that fits is enough
        {"filename": "demo-1.0.tar.gz", "requires-python": f"=={here}"},
        {"filename": "demo-3.0.tar.gz"},  # nothing declared
        {"filename": "demo-4.0.tar.gz", "requires-python": "not a specifier"},
    ]
    with _index(monkeypatch, tmp_path, files):
        said = R.python_mismatch("demo", "2.0")
        assert said == (
            f"demo 2.0 requires Python >=3.99, and its environment is made with the Python that runs grpo-identity "
            f"({here}): install and run grpo-identity under a Python >=3.99 to audit this release"
        )
        assert [R.python_mismatch("demo", r) for r in ("1.0", "3.0", "4.0", "5.0")] == [None] * 4
        # a build that no plan resolves says so in one line, instead of each resolver's report
        monkeypatch.setattr(R, "_install", lambda *a: (_ for _ in ()).throw(R._Unresolved("uv: no solution")))
        resolvers = "as of the release, pins exempt: uv: no solution | today's index: uv: no solution"
        for release, why in (("2.0", said), ("1.0", resolvers)):
            with pytest.raises(AdapterError) as exc:
                R._build(tmp_path / "env", "demo", release, "2026-01-01T00:00:00Z", "uv")
            assert str(exc.value) == f"demo=={release} cannot be installed here: {why}"
    monkeypatch.setenv("GRPO_IDENTITY_SIMPLE_INDEX", "http://127.0.0.1:9/nothing")  # offline: cannot be told
    assert R.python_mismatch("demo", "2.0") is None


def test_the_linked_subpackages_are_pyprojects_package_dir():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert {k for k, v in mapping.items() if k != "grpo_identity"} == {
        f"grpo_identity.{s}" for s in R.MAPPED_SUBPACKAGES
    }
    folders = R.package_map()
    assert set(folders) == {"grpo_identity", *mapping} and all(
        Path(f, "__init__.py").is_file() for f in folders.values()
    )


def _bare_release_env(tmp_path, monkeypatch, uploaded=None):
    """A cached 'release' environment without pip or any package (a bare venv), recorded as built; no index."""
    monkeypatch.setenv("GRPO_IDENTITY_ENVS", str(tmp_path))
    monkeypatch.setenv("GRPO_IDENTITY_SIMPLE_INDEX", "http://127.0.0.1:9/nothing")  # nothing listens there
    monkeypatch.setattr(R, "upload_time", lambda fw, rel: uploaded)
    env = R.env_dir("trl", "9.9.9", uploaded)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    (env / "environment.json").write_text(json.dumps({"framework": "trl", "release": "9.9.9", "method": "test"}))
    return env, R._python_of(env)


def test_a_cached_environment_runs_the_projects_code_and_nothing_else_of_the_callers(tmp_path, monkeypatch):
    env, python = _bare_release_env(tmp_path, monkeypatch)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "callers-folder"))
    got = R.ensure("trl", "9.9.9")
    assert got.python == str(python) and got.record["method"] == "test" and got.summary()["path"] == str(env)

    def runs(code, environ):
        return subprocess.run([str(python), "-c", code], cwd=tmp_path, env=environ, capture_output=True).returncode

    environ = R.child_environ()
    assert "PYTHONPATH" not in environ and json.loads(environ[R.PACKAGE_VAR]) == R.package_map()
    assert runs("import grpo_identity.foundation, grpo_identity.checks", environ) == 0  # linked in by name
    assert runs("import numpy", environ) != 0  # the caller's site-packages are not the release's
    bare = {k: v for k, v in environ.items() if k != R.PACKAGE_VAR}
    assert runs("import grpo_identity", bare) != 0  # the variable is what links it


def test_a_recipe_change_builds_a_new_environment_and_the_old_one_is_listed_stale(tmp_path, monkeypatch):
    env, _ = _bare_release_env(tmp_path, monkeypatch)
    built = []

    def build(env, fw, rel, uploaded, uv):
        built.append(env.name)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        return {"framework": fw, "release": rel, "method": "test"}

    monkeypatch.setattr(R, "_build", build)
    R.ensure("trl", "9.9.9")
    assert built == []  # the recipe matches: reused
    monkeypatch.setitem(R.RELEASE_PINS, ("trl", "9.0", "10.0"), ("transformers<4",))
    R.ensure("trl", "9.9.9")
    assert len(built) == 1 and built[0] != env.name
    (env.parent / built[0] / "environment.json").write_text(json.dumps({"framework": "trl", "release": "9.9.9"}))
    (tmp_path / "trl-1.16.0").mkdir()  # an environment of the layout before keys: half-made now
    states = {row["name"]: row["state"] for row in R.list_envs()}
    assert states == {env.name: "stale", built[0]: "current", "trl-1.16.0": "half-made"}
    assert {r["name"] for r in R.prune(dry_run=True)} == {env.name, "trl-1.16.0"} and env.exists()
    R.prune()
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == [built[0]]


def test_a_release_whose_build_fails_leaves_neither_its_folder_nor_its_lock(tmp_path, monkeypatch):
    def failing_build(env, framework, release, uploaded, uv):
        env.mkdir(parents=True)
        (env / "half-made").write_text("")
        raise AdapterError(f"{framework}=={release} cannot be installed here")

    monkeypatch.setenv("GRPO_IDENTITY_ENVS", str(tmp_path))
    monkeypatch.setenv("GRPO_IDENTITY_SIMPLE_INDEX", "http://127.0.0.1:9/nothing")  # offline: the build is tried
    monkeypatch.setattr(R, "upload_time", lambda fw, rel: None)
    monkeypatch.setattr(R, "_build", failing_build)
    with open(os.devnull, "w") as quiet, pytest.raises(AdapterError, match="trl==99.0 cannot be installed"):
        R.ensure("trl", "99.0", log=quiet)
    assert list(tmp_path.iterdir()) == []


def test_the_envs_command_lists_and_prunes(tmp_path, monkeypatch, capsys):
    from grpo_identity.app.cli import main

    env, _ = _bare_release_env(tmp_path, monkeypatch)
    (tmp_path / "verl-0.6.0").mkdir()
    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    assert env.name in out and "current" in out and "half-made" in out and "grpo-identity envs prune" in out
    assert main(["envs", "prune", "--dry-run", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)["environments"]] == ["verl-0.6.0"]
    assert main(["envs", "list", "--all"]) == 2 and "go with prune" in capsys.readouterr().err
    assert main(["envs", "prune", "--all"]) == 0 and not env.exists()


def test_a_folder_of_the_users_under_the_environments_folder_is_never_listed_or_pruned(tmp_path, monkeypatch):
    from grpo_identity.foundation import UsageError

    env, _ = _bare_release_env(tmp_path, monkeypatch)
    for mine in ("adir", "trl-notes", "photos-2024"):  # GRPO_IDENTITY_ENVS set to a folder that holds more
        (tmp_path / mine).mkdir()
        (tmp_path / mine / "precious.txt").write_text("x")
    (tmp_path / "ms-swift-4.5.3-0123456789").mkdir()  # an environment half-made
    assert {row["name"] for row in R.list_envs()} == {env.name, "ms-swift-4.5.3-0123456789"}
    assert [row["name"] for row in R.prune(everything=True)] == sorted([env.name, "ms-swift-4.5.3-0123456789"])
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "adir",
        "photos-2024",
        "trl-notes",
    ]
    monkeypatch.setenv("GRPO_IDENTITY_ENVS", str(tmp_path / "adir" / "precious.txt"))
    with pytest.raises(UsageError, match="GRPO_IDENTITY_ENVS: .*precious.txt is not a folder"):
        R.list_envs()


# --- against the real index (slow: each builds an environment once) --------------------------------------
def _env_or_skip(framework, release):
    try:
        return R.ensure(framework, release)
    except AdapterError as exc:
        pytest.skip(f"the environment of {framework} {release} cannot be built here (offline?): {exc}")


@pytest.mark.slow
@pytest.mark.xdist_group("trl")
def test_a_release_environment_is_installed_compiled_to_bytecode():
    """Where PYTHONDONTWRITEBYTECODE is set (CI images set it) nothing but the install writes bytecode, and each
    child would compile torch and the framework from source on every start."""
    env = _env_or_skip("trl", "0.22.0")
    if env.record["made_with"].startswith("uv"):  # pip compiles unless told not to
        assert all("--compile-bytecode" in command for command in env.record["commands"])
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([env.python, "-c", where], capture_output=True, text=True, check=True).stdout.strip())
    for module in ("trl", "torch", "transformers"):
        assert list((site / module / "__pycache__").glob("__init__.*.pyc")), module


@pytest.mark.slow
@pytest.mark.xdist_group("trl")
def test_trl_0_22_0_is_resolved_as_of_its_release_day_and_says_so():
    env = _env_or_skip("trl", "0.22.0")
    record = env.record
    assert record["uploaded"].startswith("2025-08-29") and record["as_of"] == "2025-08-30T00:00:00Z"
    assert record["method"].startswith("as of the release")
    versions = record["versions"]
    assert versions["trl"] == "0.22.0" and versions["torch"] == "2.13.0+cpu"
    # the libraries of its day, not today's (the lock's): accelerate 1.10.1 of 2025-08-25, numpy 2.3.x
    assert versions["accelerate"].startswith("1.10.") and versions["numpy"].startswith("2.3.")
    assert "vllm" not in versions and "kernels" not in versions


@pytest.mark.slow
@pytest.mark.xdist_group("trl")
def test_an_audit_from_a_second_venv_finds_the_same_release_environment_and_runs(tmp_path):
    """`pip install .` into another venv, then audit: the cached environment serves it (issue 27's
    'No package metadata was found for trl' came from an environment layered on the first venv)."""
    uv = R._uv()
    if uv is None:
        pytest.skip("uv is not installed")
    mine = _env_or_skip("trl", "1.16.0")
    venv = tmp_path / "second"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    install = [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(ROOT)]
    res = subprocess.run(install, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        pytest.skip(f"the project could not be installed into a second venv here: {res.stderr[-300:]}")
    cmd = [str(venv / "bin" / "grpo-identity"), "audit", "trl", "--release", "1.16.0", "--level", "advantage",
           "--set", "scale_rewards=group", "--max-examples", "10", "--json"]  # fmt: skip
    run = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert run.returncode in (0, 1), run.stderr[-2000:]
    env = json.loads(run.stdout)["target_info"]["environment"]
    assert env["path"] == mine.summary()["path"]  # the same environment, not one of its own
    assert env["versions"]["trl"] == "1.16.0" and env["as_of"] and env["method"].startswith("as of the release")


def test_a_reports_environment_path_writes_the_home_folder_as_a_tilde(monkeypatch):
    monkeypatch.setenv("HOME", "/srv/someone/")
    inside = R.ReleaseEnv("trl", "1.0", "py", {"path": "/srv/someone/.cache/e"})
    beside = R.ReleaseEnv("trl", "1.0", "py", {"path": "/srv/someone-else/e"})
    assert inside.summary()["path"] == "~/.cache/e" and beside.summary()["path"] == "/srv/someone-else/e"
    monkeypatch.setenv("HOME", "/")  # a home of / rewrites nothing
    assert R.ReleaseEnv("trl", "1.0", "py", {"path": "/opt/e"}).summary()["path"] == "/opt/e"
