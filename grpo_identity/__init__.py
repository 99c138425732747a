"""grpo-identity: the group-standard-deviation identity of GRPO, Dr. GRPO and DAPO, proven,
checked and measured (arXiv 2607.00152).

Light on import: numpy only.  SymPy (``grpo_identity.formulas``, ``grpo_identity.proofs``) and
torch (``grpo_identity.trainer``) load when those modules are imported.
"""

from __future__ import annotations

__version__ = "0.1.0"
