"""``grpo_identity.checks`` itself: its public names and a light import."""

from __future__ import annotations

import subprocess
import sys

import pytest

import grpo_identity.checks as checks


def test_every_public_name_is_importable_and_listed():
    assert checks.__all__ == sorted(checks._EXPORTS)
    for name in checks.__all__:
        assert getattr(checks, name) is not None
    with pytest.raises(AttributeError):
        checks.no_such_name  # noqa: B018


def test_the_report_type_has_one_name_for_both_levels():
    assert checks.AuditReport is checks.Report


def test_importing_checks_loads_neither_torch_sympy_nor_hypothesis():
    code = "import grpo_identity.checks, sys; print([m for m in ('torch', 'sympy', 'hypothesis') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
