"""The layers of ARCHITECTURE.md: every import of every module (inside functions too) points down.

Each module belongs to one layer; a module may import its own layer and the layers its row
allows, nothing above.  The import graph is read from the source with :mod:`ast` (no module is
imported), so a lazy ``import`` inside a function counts like one at the top.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: source folder -> the package it is installed as (pyproject's package-dir)
SOURCES = {
    "grpo_identity": "grpo_identity",
    "proofs": "grpo_identity.proofs",
    "checks": "grpo_identity.checks",
    "trainer": "grpo_identity.trainer",
}

#: layer -> module prefixes (longest prefix wins)
LAYERS: dict[str, tuple[str, ...]] = {
    "root": ("grpo_identity", "grpo_identity.__main__"),
    "foundation": (
        "grpo_identity.foundation",
        "grpo_identity._validate",
        "grpo_identity.data",
        "grpo_identity.paper",
        "grpo_identity.provenance",
        "grpo_identity.claims",
    ),
    "formulas": ("grpo_identity.formulas", "grpo_identity.registry"),
    "closed_forms": ("grpo_identity.closed_forms", "grpo_identity.allocation"),
    "dial": ("grpo_identity.dial", "grpo_identity.variants", "grpo_identity.objectives"),
    "proofs": ("grpo_identity.proofs",),
    "checks": ("grpo_identity.checks",),
    "analysis": ("grpo_identity.analysis",),
    "trainer": ("grpo_identity.trainer",),
    "integrations": ("grpo_identity.integrations",),
    "app": ("grpo_identity.app",),
}
_BASE = {"root", "foundation"}
#: layer -> the layers it may import besides itself
ALLOWED: dict[str, set[str]] = {
    "root": {"foundation", "app"},  # the root package is light; ``python -m grpo_identity`` runs the CLI
    "foundation": set(),
    "formulas": _BASE,
    "closed_forms": _BASE,  # numeric twins are tested against the formulas, never built from them at run time
    "dial": _BASE | {"closed_forms"},
    "proofs": _BASE | {"formulas", "dial"},  # dial: the presets' parameters only, never its numeric functions
    "checks": _BASE | {"formulas", "closed_forms", "dial"},
    "analysis": _BASE | {"formulas", "closed_forms", "dial"},
    "trainer": _BASE | {"formulas", "closed_forms", "dial", "analysis"},
    "integrations": _BASE | {"formulas", "closed_forms", "dial", "analysis", "checks"},
    "app": set(LAYERS),
}


def layer_of(module: str) -> str | None:
    """The layer of a module of this project (None for other packages)."""
    best, where = "", None
    for layer, prefixes in LAYERS.items():
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > len(best):
                best, where = p, layer
    return where


def modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> source file."""
    out = {}
    for folder, package in SOURCES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts]) if parts else package
            if (
                folder == "grpo_identity"
                and name.split(".")[1:2]
                and (ROOT / name.split(".")[1]).is_dir()
                and name.split(".")[1] in SOURCES
            ):
                continue  # not reached: the mapped folders live outside grpo_identity/
            out[name] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules imported anywhere in ``path`` (relative imports resolved; ``from pkg
    import sub`` counts as importing ``pkg.sub`` when that is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known)
    return {m for m in found if m.split(".")[0] == "grpo_identity"}


def violations() -> list[str]:
    mods = modules()
    known = set(mods)
    bad = []
    for name, path in mods.items():
        own = layer_of(name)
        assert own is not None, (
            f"module {name} belongs to no layer: add it to LAYERS (tests/test_architecture.py) and ARCHITECTURE.md"
        )
        for target in sorted(imports_of(name, path, known)):
            if target == "grpo_identity":
                continue
            t = layer_of(target)
            if t is not None and t != own and t not in ALLOWED[own]:
                bad.append(f"{name} ({own}) imports {target} ({t})")
    return bad


def test_every_import_points_down_the_layers():
    assert violations() == []


def test_the_checker_sees_imports_inside_functions(tmp_path, monkeypatch):
    # a core module that imports the application lazily is caught
    fake = tmp_path / "grpo_identity"
    fake.mkdir()
    (fake / "dial.py").write_text("def f():\n    from grpo_identity.app import cli\n    return cli\n")
    (fake / "app").mkdir()
    (fake / "app" / "__init__.py").write_text("")
    (fake / "app" / "cli.py").write_text("")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    monkeypatch.setattr(__import__(__name__), "SOURCES", {"grpo_identity": "grpo_identity"})
    assert "grpo_identity.dial (dial) imports grpo_identity.app.cli (app)" in violations()


@pytest.mark.parametrize(
    "name",
    [
        "grpo_identity.formulas",
        "grpo_identity.checks.auditor",
        "grpo_identity.trainer.lm.train",
        "grpo_identity.app.commands.verify",
    ],
)
def test_every_module_has_a_layer(name):
    assert layer_of(name) is not None and name in modules()


#: the longest function a reader is asked to hold in their head (benchmarks and tests aside)
MAX_FUNCTION_LINES = 80


def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Functions of the package longer than ``limit`` lines (decorators excluded), longest first."""
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append((lines, f"{name}.{node.name} ({lines} lines)"))
    return [text for _, text in sorted(found, reverse=True)]


def test_no_function_is_longer_than_eighty_lines():
    assert long_functions() == []


def test_the_length_check_finds_a_long_function():
    assert long_functions(limit=20), "some function of the package is longer than 20 lines"


#: an absolute path into a user's home or this machine's scratch folders
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:root|home/[\w.-]+|Users/[\w.-]+|tmp/pytest-of-[\w.-]+)/")


def machine_paths(root: Path = ROOT) -> list[str]:
    """Committed text files that hold an absolute path of the machine that wrote them."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no git here")
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    found = []
    for name in filter(None, listed.stdout.split("\0")):
        path = root / name
        if path.suffix in {".png", ".pdf", ".gz", ".zip"} or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{name}: {m.group(0)}" for m in MACHINE_PATH.finditer(text)][:1]
    return found


def test_no_committed_file_holds_a_path_of_the_machine_that_wrote_it():
    assert machine_paths() == []


def test_the_path_check_finds_a_home_folder(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    home = "/" + "root"  # spelled in two parts, so that this file does not hold what it looks for
    (tmp_path / "r.jsonl").write_text(f'{{"path": "{home}/.cache/x", "ok": "~/.cache/y"}}\n')
    subprocess.run(["git", "-C", str(tmp_path), "add", "r.jsonl"], check=True)
    assert machine_paths(tmp_path) == [f"r.jsonl: {home}/"]


def private_imports() -> list[str]:
    """``from grpo_identity.X import _name`` across modules: a module's private names are its own."""
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grpo_identity"):
                if node.module != name.removesuffix(".__init__"):
                    found += [f"{name} imports {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return [f for f in found if not f.endswith((".__version__", ".__all__"))]


def test_no_module_imports_another_modules_private_names():
    assert private_imports() == []


def import_cycles(prefix: str = "grpo_identity.checks") -> list[list[str]]:
    """The import cycles among the modules under ``prefix`` (imports inside functions count): each a loop of
    module names, the first one repeated at its end; none means the modules can be read bottom up."""
    mods = {n: p for n, p in modules().items() if n == prefix or n.startswith(prefix + ".")}
    graph = {n: sorted(imports_of(n, p, set(mods)) & set(mods) - {n}) for n, p in mods.items()}
    cycles, done = [], set()
    for start in graph:
        path, stack = [start], [iter(graph[start])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                done.add(path.pop())
                stack.pop()
            elif nxt in path:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in done:
                path.append(nxt)
                stack.append(iter(graph[nxt]))
        done.add(start)
    return cycles


_C = "grpo_identity.checks"
#: the layers inside checks/, lowest first (ARCHITECTURE.md): a module imports its own layer and those below.  A
#: layer is a list of modules (exactly) and packages (with everything under them, longest prefix first)
CHECKS_LAYERS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("types", (_C, f"{_C}.findings", f"{_C}.report", f"{_C}.frameworks", f"{_C}.frameworks.registry",
               f"{_C}.frameworks.contract"), ()),
    ("calls", (), (f"{_C}.calls",)),
    ("measure", (), (f"{_C}.measure",)),
    ("drivers", (), (f"{_C}.frameworks",)),
    ("audit", tuple(f"{_C}.{m}" for m in ("verdict", "gradient", "options", "auditor", "plugin", "export", "claims")),
     ()),
)  # fmt: skip


def checks_layer(module: str) -> int | None:
    """The index in :data:`CHECKS_LAYERS` of a module under checks/ (None for one no layer names)."""
    for i, (_, exact, _) in enumerate(CHECKS_LAYERS):
        if module in exact:
            return i
    found = [
        (len(p), i)
        for i, (_, _, packages) in enumerate(CHECKS_LAYERS)
        for p in packages
        if module == p or module.startswith(p + ".")
    ]
    return max(found)[1] if found else None


def checks_violations() -> list[str]:
    """Each import in checks/ of a module in a layer above the importer's (and each module in no layer)."""
    mods = modules()
    wrong = []
    for name, path in mods.items():
        if not name.startswith(_C):
            continue
        mine = checks_layer(name)
        if mine is None:
            wrong.append(f"{name} is in no layer of CHECKS_LAYERS")
            continue
        for other in imports_of(name, path, set(mods)):
            theirs = checks_layer(other) if other.startswith(_C) else None
            if theirs is not None and theirs > mine:
                wrong.append(f"{name} ({CHECKS_LAYERS[mine][0]}) imports {other} ({CHECKS_LAYERS[theirs][0]})")
    return wrong


def test_every_module_of_checks_is_in_a_layer_and_imports_none_above_it():
    assert checks_violations() == []


def test_the_checks_layers_catch_a_measurement_that_imports_the_audit(tmp_path, monkeypatch):
    assert checks_layer(f"{_C}.frameworks") == 0 and checks_layer(f"{_C}.frameworks.exported.trl") == 3
    fake = tmp_path / "checks"
    (fake / "measure").mkdir(parents=True)
    for path in ("__init__.py", "verdict.py", "measure/__init__.py", "elsewhere.py"):
        (fake / path).write_text("")
    (fake / "measure" / "x.py").write_text(
        "def f():\n    from grpo_identity.checks import verdict\n    return verdict\n"
    )
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    monkeypatch.setattr(__import__(__name__), "SOURCES", {"checks": _C})
    assert checks_violations() == [
        f"{_C}.elsewhere is in no layer of CHECKS_LAYERS",
        f"{_C}.measure.x (measure) imports {_C}.verdict (audit)",
    ]


def test_no_import_cycle_in_checks():
    assert import_cycles() == []


def test_the_cycle_check_finds_a_loop_through_a_function_level_import(tmp_path, monkeypatch):
    pkg = tmp_path / "checks"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from grpo_identity.checks.b import y\nx = 1\n")
    (pkg / "b.py").write_text("def y():\n    from grpo_identity.checks import a\n    return a.x\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "SOURCES", {"checks": "grpo_identity.checks"})
    found = import_cycles()
    assert found and {"grpo_identity.checks.a", "grpo_identity.checks.b"} <= set(found[0])
