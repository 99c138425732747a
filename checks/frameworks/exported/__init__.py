"""The bodies of exported test packs (``grpo-identity export-tests``, :mod:`grpo_identity.checks.export`).

Each module here is the text of one framework's exported test: it imports only pytest, torch and the framework
(never this project), and reads the case the exporter writes into its ``CASE = {}`` line.  The exporter copies
the module's source into the user's file with that line filled in; nothing imports these modules at run time.
"""
