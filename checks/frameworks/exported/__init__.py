"""The bodies of exported test packs (``grpo-identity export-tests``, :mod:`grpo_identity.checks.export`).

Each module here is the text of one framework's exported test: it imports only pytest and what the framework's
own environment holds (the framework, torch, numpy and the framework's dependencies; never this project), and
reads the case the exporter writes into its ``CASE = {}`` line.  The exporter copies the module's source into the
user's file with that line filled in.  The drivers import the same modules for their split step (one source of
the step machinery); the exported file never imports the drivers.
"""
