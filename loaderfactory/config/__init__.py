"""The config layer: specs (pydantic), the registry of kinds, validation, JSON Schema and reference.

Nothing here imports torch; Hydra and OmegaConf are imported only when a config needs converting.
"""
