"""Subcommands of the ``grpo-identity`` CLI: each module has ``HELP``, ``configure`` and ``run``."""
