"""The specs: one module per family of kinds, and the root spec of a whole loader (``pipeline``)."""
