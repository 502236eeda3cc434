"""Mixtures: several datasets read as one, in shares that follow weights (fixed or on a schedule).

The mixture is a map-style dataset whose index is a position on the mixture's timeline: which source
position ``k`` reads, and which of that source's samples, is a pure function of ``(seed, k, config)``
(:mod:`.counts`, :mod:`.blocks`). The loaders' order engine splits positions between ranks and
resumes them at any world size, so a mixture resumes exactly, with no draw replayed.
"""
