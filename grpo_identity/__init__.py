"""grpo-identity: the group-standard-deviation identity of GRPO, Dr. GRPO and DAPO, proven,
checked and measured (arXiv 2607.00152).

Light on import: numpy only.  SymPy (``grpo_identity.formulas``, ``grpo_identity.proofs``) and
torch (``grpo_identity.trainer``) load when those modules are imported.
"""

from __future__ import annotations

__version__ = "0.2.0"

#: public names loaded on first use (keeps ``import grpo_identity`` light)
_LAZY = {"allocate": "grpo_identity.allocation"}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'grpo_identity' has no attribute {name!r}")
