"""Lightning fits resumed at another world size (2 → 1 and 1 → 2): every later epoch is whole, and the
totals the trainer shows are the batches each epoch really has; both packages, synthetic data and
shards (through the ``torch`` and the ``sharded`` loader kinds).

One module fixture does every fit: the one-process saves here, then one torchrun group of 2 gloo ranks
saves and resumes the one-process checkpoints (``tests/support/lightning_elastic_fit.py``), then the
one-process resumes of its checkpoints here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lightning_elastic_fit import DATA, EPOCHS, ITEMS, PACKAGES, SCENARIOS, SHARDS, STOP, resume, save
from lightning_helpers import installed
from shards_data import write_tar_shards

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings(
        # Lightning 2.6 flattens its loaders with a torch pytree class that torch 2.10+ deprecates.
        "ignore:.*LeafSpec.* is deprecated:FutureWarning",
        # Lightning's advice on too few workers and a logging interval longer than an epoch.
        "ignore:.*does not have many workers:UserWarning",
        "ignore:.*smaller than the logging interval:UserWarning",
        # The resumed fit takes no checkpoints, so it has not the saving fit's callback.
        "ignore:Be aware that when using .ckpt_path.:UserWarning",
    ),
]

Fits = dict[tuple[str, str, str], list[dict[str, Any]]]
"""(package, data, "2to1" or "1to2") → per rank of the resumed fit: what it saved and what it resumed."""


def _two_ranks(out: Path, scenarios: list[tuple[str, str]]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PL_GLOBAL_SEED", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests" / "support")]), OMP_NUM_THREADS="1")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(ROOT / "tests/support/lightning_elastic_fit.py"), str(out), *("-".join(s) for s in scenarios),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def fits(tmp_path_factory: pytest.TempPathFactory) -> Fits:
    """Every scenario saved on 1 process and resumed on 2, and saved on 2 and resumed on 1."""
    out = tmp_path_factory.mktemp("elastic")
    write_tar_shards(out / "shards", SHARDS)
    present = [(p, d) for p, d in SCENARIOS if installed(p)]
    one = {(p, d): _plain(save(p, d, out / "shards", out / f"{p}-{d}" / "1", world=1)) for p, d in present}
    _two_ranks(out, present)
    records: Fits = {}
    for package, data in present:
        here = out / f"{package}-{data}"
        ranks = [json.loads((here / "2" / f"rank{r}.json").read_text()) for r in range(2)]
        records[package, data, "1to2"] = [
            {"saved": [one[package, data]], "resumed": r["resumed"]} for r in ranks
        ]
        resumed = _plain(
            resume(package, data, out / "shards", here / "2" / "saved.ckpt", here / "2to1", world=1)
        )
        records[package, data, "2to1"] = [{"saved": [r["saved"] for r in ranks], "resumed": resumed}]
    return records


def _plain(record: Any) -> Any:
    """``record`` as the ranks' JSON files hold it (epochs keyed by strings)."""
    return json.loads(json.dumps(record))


def _epoch(record: dict[str, Any], epoch: int) -> dict[str, Any]:
    return record["resumed"]["epochs"][str(epoch)]  # type: ignore[no-any-return]


@pytest.mark.parametrize("direction", ["2to1", "1to2"])
@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("package", PACKAGES)
def test_every_epoch_after_an_elastic_resume_is_whole_and_its_total_right(
    fits: Fits, package: str, data: str, direction: str
) -> None:
    """Saved mid-epoch 0 at one world size, resumed at the other with ``max_epochs=3``: epoch 0's rest
    completes it, each later epoch trains on every id exactly once, and each epoch's last ``batch_idx``
    reaches the total the trainer shows (``num_training_batches``)."""
    pytest.importorskip(package)
    ranks = fits[package, data, direction]
    before = [i for saved in ranks[0]["saved"] for i in saved["0"]["ids"]]
    for epoch in range(EPOCHS):
        seen = [i for rank in ranks for i in _epoch(rank, epoch)["ids"]]
        assert sorted(seen + (before if epoch == 0 else [])) == list(range(ITEMS)), f"epoch {epoch}"
        for rank in ranks:
            record = _epoch(rank, epoch)
            assert set(record["totals"]) == {record["last"] + 1}, f"epoch {epoch}"
    assert all(rank["resumed"]["reload"] == 0 for rank in ranks)  # the trainer's own setting, back
    world = len(ranks)
    assert _epoch(ranks[0], 1)["last"] + 1 == ITEMS // (2 * world)  # batches of 2 items
    assert len(before) == STOP * 2 * (3 - world)  # the saving fit's world size is the other one
