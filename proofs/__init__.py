"""``grpo_identity.proofs``: SymPy proofs of every claim of the paper (imports SymPy)."""
