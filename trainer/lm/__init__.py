"""The compact LM trainer: a small transformer from a config, the task, rollouts, the real loss,
the identity check on real gradients (exact per-sample scores, or projected along random
directions by forward mode), the training loop, the fixed-policy conditional experiment
(E[g | k] against σ_k) and their figures.

Import :mod:`.config`, :mod:`.conditional_stats` and :mod:`.preregistered` without torch; every other module imports
torch.
"""
