"""Everything that touches Hydra or OmegaConf: config conversion, composition, the CLI app."""
