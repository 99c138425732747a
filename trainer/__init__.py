"""``grpo_identity.trainer``: controlled runs that measure the identity with real gradients.

Light on import: torch and transformers load inside the modules that need them.
"""
