"""The Hydra edge: composing the packaged configs (``compose``), the ``_target_`` that Hydra
instantiates into a ``Loader``, and the ``loaderfactory`` command.

Nothing in the core imports this subpackage; OmegaConf nodes become plain data in
:mod:`loaderfactory.plain`, which the core and the edges share.
"""
