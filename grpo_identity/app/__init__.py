"""The application layer: the command line, the verify job, the notebooks' rendering and helpers.

Nothing below this layer imports it.
"""
