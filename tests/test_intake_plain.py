"""A plain dict config is validated without importing OmegaConf; one that needs OmegaConf still goes there."""

from __future__ import annotations

import subprocess
import sys

from loaderfactory.intake import validate

DATASET = {"kind": "synthetic", "length": 10, "fields": {"x": {"shape": [2]}}}
PLAIN = {"dataset": DATASET, "loader": {"kind": "torch", "batch_size": 2}}


def test_a_plain_dict_spares_the_omegaconf_import() -> None:
    script = (
        "import sys; from loaderfactory.intake import validate; "
        f"validate({PLAIN!r}); print('omegaconf' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_plain_and_omegaconf_paths_give_the_same_spec() -> None:
    interpolated = {
        "dataset": {**DATASET, "length": "${loader.batch_size}"},
        "loader": {"kind": "torch", "batch_size": 10},
    }
    tupled = {"dataset": {**DATASET, "fields": {"x": {"shape": (2,)}}}, "loader": PLAIN["loader"]}
    assert validate(interpolated).dataset == validate({**PLAIN, "dataset": DATASET}).dataset
    assert validate(tupled) == validate(PLAIN)
