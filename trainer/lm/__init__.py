"""The compact LM trainer: a small transformer from a config, the task, rollouts, the real loss,
the identity check on real gradients, the training loop and its figure.

Import :mod:`.config` without torch; every other module imports torch.
"""
