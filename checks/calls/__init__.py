"""How a target is reached and called: what the user named, resolved (``spec``, ``adapters``), loaded and called
as written (``target``, ``calling``), in this process or in a child (``child``, ``protocol``), in a release
environment of its own (``releases``)."""
