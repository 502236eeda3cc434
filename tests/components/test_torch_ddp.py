"""The ``torch`` loader kind under torch.distributed (the real 2-process run is in test_sharded_ddp.py)."""

from __future__ import annotations

import pytest


def test_torch_kind_reads_torchruns_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a process group, RANK and WORLD_SIZE (torchrun's) split the data; ``off`` reads it all."""
    import loaderfactory

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    config = {"loader": {"kind": "torch", "batch_size": 2, "shuffle": True}, "seed": 4}
    with loaderfactory.build_loader(config, dataset=list(range(9))) as loader:
        mine = [int(i) for batch in loader for i in batch]
    with loaderfactory.build_loader(
        {**config, "loader": {**config["loader"], "distributed": "off"}}, dataset=list(range(9))
    ) as loader:
        everything = [int(i) for batch in loader for i in batch]
    assert len(mine) == 3 and sorted(everything) == list(range(9))
    assert mine == everything[1::3]
