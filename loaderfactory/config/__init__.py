"""The config layer: specs (pydantic), the registry of kinds, validation, JSON Schema and reference.

Nothing here imports torch, Hydra or OmegaConf: configs arrive as plain data (:mod:`loaderfactory.plain`).
"""
