"""The audit's options, built and checked once: one frozen record that the CLI, the pytest plugin
and :func:`grpo_identity.checks.audit` all build, and that nothing downstream checks again.
Standard library only at import (the pytest plugin reads its defaults from here).

Every option is bounded (an audit cannot be asked to run for ever), and a bad one raises
:class:`OptionError`, which names the field; each front end words it with the option as its user
wrote it (``--max-examples`` on the command line, ``max_examples=`` in Python and in the marker).

>>> AuditOptions(expect="grpo", max_examples=50).expected.name
'grpo'
>>> AuditOptions(timeout=float("inf"))
Traceback (most recent call last):
...
grpo_identity.foundation.OptionError: timeout must be a finite number of seconds in (0, 3600], got inf
>>> OptionError("timeout", "must be > 0").worded({"timeout": "--timeout"})
'--timeout must be > 0'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from grpo_identity.foundation import OptionError

if TYPE_CHECKING:  # the dial (numpy) loads when an expected preset is read, not with this module
    from grpo_identity import dial as D
    from grpo_identity.checks.measure.declared import Declared
    from grpo_identity.variants import Variant

__all__ = [
    "MAX_EXAMPLES",
    "MAX_TIMEOUT",
    "DEFAULT_MAX_EXAMPLES",
    "CALL_TIMEOUT",
    "FRAMEWORK_LOAD_TIMEOUT",
    "OptionError",
    "AuditOptions",
]

#: the most hypothesis examples one audit may run (about a minute for a function in a child)
MAX_EXAMPLES = 10_000
#: the longest timeout, in seconds, of one call into the target or of loading it
MAX_TIMEOUT = 3600.0
#: hypothesis examples of an audit unless told
DEFAULT_MAX_EXAMPLES = 200
#: seconds per call into the target (and for loading it) unless told
CALL_TIMEOUT = 60.0
#: seconds for loading a framework target unless told (its import and trainer build take minutes
#: on a busy machine)
FRAMEWORK_LOAD_TIMEOUT = 600.0


def _seconds(field: str, value: Any) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT:
        raise OptionError(field, f"must be a finite number of seconds in (0, {MAX_TIMEOUT:g}], got {value!r}")
    return float(value)


@dataclass(frozen=True)
class AuditOptions:
    """How to audit (what to audit is the target spec, :mod:`grpo_identity.checks.calls.spec`)."""

    expect: str | D.Dial | Callable[[int, int], float] | Declared | None = None
    """The expected preset (a name or a :class:`~grpo_identity.dial.Dial`), a variant's name
    (:mod:`grpo_identity.variants`), or a declared update
    coefficient: a formula ``"c=sigma**2/G"`` or a callable c(k, G)
    (:mod:`grpo_identity.checks.measure.declared`); None: any preset."""
    max_examples: int = DEFAULT_MAX_EXAMPLES
    """Hypothesis examples in all, shared by the properties (1 to :data:`MAX_EXAMPLES`)."""
    timeout: float = CALL_TIMEOUT
    """Seconds per call into a target in a child process (0 < t ≤ :data:`MAX_TIMEOUT`)."""
    load_timeout: float | None = None
    """Seconds for loading it; None: ``timeout``, or :data:`FRAMEWORK_LOAD_TIMEOUT` for a framework."""
    isolate: bool | None = None
    """Run the target in a child process (True), in this one (False), or as suits it (None: a
    spec string in a child, a callable here)."""
    python: str | None = None
    """Another interpreter for the child (a release's environment); None: this one."""
    progress: bool = False
    """A progress bar on stderr."""
    declared: Declared | None = field(default=None, init=False, compare=False)
    """Derived from ``expect``: the declared coefficient, read and evaluated once (None: a preset or any)."""

    def __post_init__(self) -> None:
        n = self.max_examples
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_EXAMPLES:
            raise OptionError("max_examples", f"must be an integer from 1 to {MAX_EXAMPLES:,}, got {n!r}")
        object.__setattr__(self, "timeout", _seconds("timeout", self.timeout))
        if self.load_timeout is not None:
            object.__setattr__(self, "load_timeout", _seconds("load_timeout", self.load_timeout))
        if self.isolate not in (None, True, False):
            raise OptionError("isolate", f"must be True, False or None, got {self.isolate!r}")
        if self.python is not None and not isinstance(self.python, str):
            raise OptionError("python", f"must be the path of an interpreter, got {self.python!r}")
        from grpo_identity.checks.measure.declared import declare, is_declared  # standard library at import

        if is_declared(self.expect):  # a formula is read (SymPy) and evaluated now, once
            object.__setattr__(self, "declared", declare(self.expect))
        elif self.expect is not None:
            self.expected  # noqa: B018  (an unknown preset is an error now, not when the audit ends)

    @property
    def expected_name(self) -> str | None:
        """What the report says was expected: the preset's name or the declared coefficient."""
        if self.declared is not None:
            return self.declared.name
        if self.expected_variant is not None:
            return self.expected_variant.name
        expected = self.expected
        return expected.name if expected is not None else None

    @property
    def expected(self) -> D.Dial | None:
        """The expected preset as a dial (None: any preset, or a declared coefficient)."""
        from grpo_identity import dial as D

        if self.declared is not None or self.expected_variant is not None:
            return None
        if self.expect is None or isinstance(self.expect, D.Dial):
            return self.expect
        if not isinstance(self.expect, str):
            raise OptionError("expect", f"must be a preset name, a Dial or a coefficient, got {self.expect!r}")
        try:
            return D.preset(self.expect)
        except (KeyError, ValueError):
            from grpo_identity.variants import VARIANTS

            presets, variants = ", ".join(D.PRESETS), ", ".join(VARIANTS)
            why = (
                f"must be a preset ({presets}), a variant ({variants}), a Dial or a coefficient c=FORMULA, "
                f"got {self.expect!r}"
            )
            raise OptionError("expect", why) from None

    @property
    def expected_variant(self) -> Variant | None:
        """The expected variant (:mod:`grpo_identity.variants`) when ``expect`` names one, else None."""
        if not isinstance(self.expect, str) or self.declared is not None:
            return None
        from grpo_identity.variants import variant

        try:
            return variant(self.expect)
        except ValueError:
            return None

    def load_timeout_for(self, framework: bool) -> float:
        """Seconds for loading a target: ``load_timeout``; unset, :data:`FRAMEWORK_LOAD_TIMEOUT`
        for a framework and ``timeout`` for anything else."""
        if self.load_timeout is not None:
            return self.load_timeout
        return FRAMEWORK_LOAD_TIMEOUT if framework else self.timeout
