"""``grpo_identity.checks``: property-based verification of advantage implementations.

Light on import: nothing heavy (no torch, no sympy) is loaded until used.
"""
