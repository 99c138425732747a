"""``grpo_identity.integrations``: the identity inside a running trainer.

:mod:`~grpo_identity.integrations.metrics` computes, from one step's rewards and advantages,
what the paper predicts about them (numpy only); :mod:`~grpo_identity.integrations.trl` is a
``transformers.TrainerCallback`` for TRL's ``GRPOTrainer``; :mod:`~grpo_identity.integrations.verl`
is a function for verl's ``DataProto`` batches.

Light on import: the framework modules load only when their integration is imported.
"""

from __future__ import annotations
