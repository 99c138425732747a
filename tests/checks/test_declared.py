"""The declared coefficient (``checks.measure.declared``): a formula in k, G, σ, μ read off an allow-list
into SymPy (never evaluated as Python), or a callable c(k, G); both evaluated once at the probed G,
anything else an ``OptionError`` naming ``expect`` and what is allowed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grpo_identity import closed_forms
from grpo_identity.checks.measure.declared import MAX_FORMULA_LENGTH, Declared, declare, is_declared
from grpo_identity.checks.measure.infer import PROBE_GROUP_SIZES
from grpo_identity.checks.options import OptionError


def test_a_formula_in_sigma_and_g_gives_the_paper_sigma_at_every_probed_g():
    d = declare("c=sigma**2/G")
    assert d.name == "c=sigma**2/G" and set(d.values) == set(PROBE_GROUP_SIZES)
    for G in PROBE_GROUP_SIZES:
        assert d.values[G][0] == d.values[G][G] == 0.0
        for k in range(1, G):
            assert d.at(k, G) == pytest.approx(closed_forms.sigma(k, G) ** 2 / G, rel=1e-14)


@pytest.mark.parametrize(
    "text, k, G, value",
    [
        ("c(k, G) = μ*(1 - mu)", 1, 4, 3 / 16),
        ("c=σ*sqrt((G-1)/G)", 2, 4, 0.5 * (3 / 4) ** 0.5),
        ("c = Min(sigma, 0.4) + Abs(-1) - 1", 2, 4, 0.4),
        ("c=G/(G-1)*sigma**2", 1, 2, 0.5),
    ],
)
def test_the_allowed_symbols_and_functions_read_as_written(text, k, G, value):
    assert declare(text).at(k, G) == pytest.approx(value, rel=1e-14)


@pytest.mark.parametrize(
    "text, words",
    [
        ("c=__import__('os')", "__import__ is not an allowed function"),
        ("c=__import__('os').system('true')", "is not allowed"),
        ("c=sigma.__class__", "'sigma.__class__' is not allowed"),
        ("c=x*sigma", "x is not an allowed symbol"),
        ("c=sigma^2", "a power is written **"),
        ("c=lambda: 1", "is not allowed"),
        ("c=sigma +", "the right side is no formula"),
        ("d=sigma", "the left side is c"),
        ("c=2**10**10", "a numeric exponent must be a number at most 1000"),
        ("c=2**999", "a power of numbers must stay below"),
        ("c=(1/2)**(10**99)", "a numeric exponent must be a number at most 1000"),  # tiny, but exact: endless
        ("c=2**-2**99", "a numeric exponent must be a number at most 1000"),
        ("c=(1/2)**(10**7)*G", "a numeric exponent must be a number at most 1000"),
        ("c=G**log(0)", "a numeric exponent must be a number at most 1000"),
        ("c=sqrt(k, G)", "sqrt takes 1 argument, got 2"),  # SymPy would read G as its evaluate flag
        ("c=log(k, G)", "log takes 1 argument, got 2"),
        ("c=Min(k)", "Min takes at least 2 arguments, got 1"),
        ("c=Max(k, G, evaluate=False)", "Max takes no keyword arguments"),
        ("c=1e-320", "finite c(k, G) > 1e-300"),
        ("c=" + "k+" * MAX_FORMULA_LENGTH + "k", f"at most {MAX_FORMULA_LENGTH} characters"),
        ("c=sigma - 0.3", "finite c(k, G) > 1e-300"),
        ("c=1/(k-1)", "gives nan at k=1, G=2"),
        ("c=((G**64)**64)**64", "gives nan"),
    ],
)
def test_anything_off_the_allow_list_is_an_option_error_naming_expect(text, words):
    with pytest.raises(OptionError) as info:
        declare(text)
    assert info.value.field == "expect" and words in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_a_callable_is_evaluated_once_and_its_errors_are_option_errors():
    calls = []

    def c(k, G):
        calls.append((k, G))
        return closed_forms.sigma(k, G) ** 2 / G

    d = declare(c)
    assert d.name.endswith("c(k, G)") and len(calls) == sum(G - 1 for G in PROBE_GROUP_SIZES)
    assert d.at(2, 4) == pytest.approx(1 / 16) and len(calls) == sum(G - 1 for G in PROBE_GROUP_SIZES)
    with pytest.raises(OptionError, match="raised ZeroDivisionError"):
        declare(lambda k, G: 1 / (k - 1))
    with pytest.raises(OptionError, match="must give a number"):
        declare(lambda k, G: "σ")


def test_what_declares_a_coefficient():
    assert is_declared("c=sigma") and is_declared(lambda k, G: 1.0)
    assert isinstance(declare(declare("c=sigma")), Declared)
    assert not is_declared("dr_grpo") and not is_declared(None)


def test_the_module_loads_no_sympy_until_a_formula_is_read():
    code = (
        "import sys; from grpo_identity.checks.measure.declared import declare; declare(lambda k, G: 1.0); "
        "assert 'sympy' not in sys.modules; declare('c=sigma'); assert 'sympy' in sys.modules"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
