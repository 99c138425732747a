"""``grpo-identity train {bernoulli,lm}``: the controlled runs.

Each model has its own command module (``train_bernoulli``, ``train_lm``) with ``HELP``,
``configure`` and ``run``; this one only dispatches.
"""

from __future__ import annotations

import argparse
import importlib

HELP = "run a controlled training run (bernoulli: scalar policies; lm: a small transformer)"

#: model name -> module under grpo_identity.app.commands
MODELS = {"bernoulli": "train_bernoulli", "lm": "train_lm"}


def configure(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="model", metavar="MODEL", parser_class=type(p))
    sub.required = True
    for name, module in MODELS.items():
        mod = importlib.import_module(f"grpo_identity.app.commands.{module}")
        q = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.configure(q)
        q.set_defaults(_train=mod.run, _prog=q.prog)


def run(args: argparse.Namespace) -> int:
    return int(args._train(args) or 0)
