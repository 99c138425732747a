"""What the probes measure of a target that can be called: the dial (``infer``), the property search
(``properties``, ``strategies``, ``search``), the edge probes, named variants and what a target does instead
(``recognise``, ``merging``, ``shaping``), reward components, the split step against its objective (``steps``,
``oracle``) and the off-policy step."""
