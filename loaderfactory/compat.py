"""The seeds' names and signatures, as thin wrappers over loaderfactory's components.

Code written for the designs loaderfactory grew from keeps working by importing from here; new
code should use the components themselves (canonical names, validated by the specs when built
from a config). Each wrapper maps the seed's argument names to ours and nothing else.
"""

from __future__ import annotations

# -- torchvtk: TorchQueueDataset ---------------------------------------------------------------------

# -- gluon-nlp: ShardedDataLoader --------------------------------------------------------------------

# -- MONAI, emloop -----------------------------------------------------------------------------------
