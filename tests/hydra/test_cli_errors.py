"""The command's own mistakes: key typos on the command line, interpolated numbers, ``_target_``
modules beside the config, and a run that draws no batch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_forks import ROOT, cli

from loaderfactory import ConfigError, validate
from loaderfactory.hydra.argv import open_config_keys, shown_overrides, with_light_overrides

pytestmark = pytest.mark.usefixtures("cli_forks")  # forks the command instead of starting it

TYPO_AND_BOUND = ["loader.batch_sise=4", "prefetch.buffer_size=0"]


@pytest.mark.parametrize(
    ("mode", "status"), [(["run.mode=validate"], 2), ([], 2), (["-m"], 1)], ids=["validate", "run", "sweep"]
)
def test_a_key_typo_is_listed_with_every_other_problem(tmp_path: Path, mode: list[str], status: int) -> None:
    """``loader.batch_sise=4 prefetch.buffer_size=0``: both problems, the typo with its closest field,
    no Hydra struct error or traceback; a sweep fails that job and exits 1 with its summary."""
    result = cli(tmp_path, *mode, *TYPO_AND_BOUND, "run.progress=false")
    assert result.returncode == status, result.stderr
    assert "2 problems in the config" in result.stderr
    assert "loader.batch_sise: unknown field (got 4). Did you mean 'batch_size'?" in result.stderr
    assert "prefetch.buffer_size: must be ≥ 1, got 0" in result.stderr
    assert "Traceback" not in result.stderr and "not in struct" not in result.stderr
    if mode == ["-m"]:
        (job,) = [line for line in result.stderr.splitlines() if line.startswith("  job 0: FAILED ")]
        assert " loader.batch_sise=4 prefetch.buffer_size=0 " in job and "++" not in job


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("run.foo=1", "run.foo: unknown field (got 1). Allowed: batches, epochs, mode,"),
        ("sed=3", "sed: unknown field (got 3). Did you mean 'seed'?"),
        ("lodaer.batch_size=3", "lodaer: unknown field (got {'batch_size': 3}). Did you mean 'loader'?"),
    ],
)
def test_unknown_keys_outside_the_slots_get_the_same_message(
    tmp_path: Path, override: str, expected: str
) -> None:
    """A typo in ``run``, at the root or in a slot's name is reported like a YAML typo, exit 2."""
    result = cli(tmp_path, "run.mode=validate", override)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unknown_hydra_key_keeps_hydras_own_error(tmp_path: Path) -> None:
    """``hydra.*`` is Hydra's: an unknown key there is Hydra's one-paragraph error naming it, exit 1."""
    result = cli(tmp_path, "run.mode=validate", "hydra.foo=1")
    assert result.returncode == 1
    assert "Could not override 'hydra.foo'" in result.stderr
    assert "Traceback" not in result.stderr


def test_only_plain_value_overrides_are_opened() -> None:
    """Picking a preset, adding, deleting, ``hydra.*`` and flags stay as typed; values get ``++``."""
    typed = ["loader=torch", "+x.y=1", "~prefetch", "++a.b=2", "hydra.run.dir=.", "--cfg", "job", "a@b=c"]
    assert open_config_keys(typed) == typed
    other_root = ["--config-name", "mine", "experiment=fast", "a.b=1"]
    assert open_config_keys(other_root) == other_root
    assert open_config_keys(["loader.batch_size=4", "seed=1", "run.mode=plan"]) == [
        "++loader.batch_size=4",
        "++seed=1",
        "++run.mode=plan",
    ]
    shown = shown_overrides(["++loader.batch_size=0", "++a.b=2"], ["loader.batch_size=0,4", "++a.b=2"])
    assert shown == ["loader.batch_size=0", "++a.b=2"]


def test_look_only_overrides_join_the_overrides_given() -> None:
    """``dataset=sine --cfg job``: the look-only overrides go right after ``dataset=sine``, where
    Hydra's parser still takes them as overrides; a run gets none."""
    light = with_light_overrides(["dataset=sine", "--cfg", "job"])
    assert light[0] == "dataset=sine" and light[-2:] == ["--cfg", "job"]
    assert "hydra.run.dir=." in light[1:-2]
    assert with_light_overrides(["loader.batch_size=4"]) == ["loader.batch_size=4"]


def test_an_env_number_gets_the_oc_decode_hint_and_the_hint_works(tmp_path: Path) -> None:
    """``${oc.env:NUM_WORKERS,0}`` is a string: refused with the ``oc.decode`` form, which then passes."""
    env = {"NUM_WORKERS": "2"}
    refused = cli(tmp_path, "run.mode=validate", "loader.num_workers=${oc.env:NUM_WORKERS,0}", env=env)
    assert refused.returncode == 2, refused.stderr
    assert "loader.num_workers: must be a whole number, got '2'; the interpolation" in refused.stderr
    hint = """'loader.num_workers="${oc.decode:${oc.env:NUM_WORKERS,0}}"'"""
    assert hint in refused.stderr
    decoded = cli(tmp_path, "--cfg", "job", "--resolve", hint.strip("'"), env=env)
    assert decoded.returncode == 0, decoded.stderr
    assert "num_workers: 2\n" in decoded.stdout
    passed = cli(tmp_path, "run.mode=validate", hint.strip("'"), env=env)
    assert passed.returncode == 0, passed.stderr


def test_a_number_typed_as_a_string_stays_strict_without_the_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """``num_workers: "2"`` typed literally is refused as before; only an interpolation gets the hint."""
    from omegaconf import OmegaConf

    monkeypatch.setenv("LF_TEST_WORKERS", "3")
    node = OmegaConf.create(
        {
            "dataset": {"kind": "synthetic"},
            "loader": {"kind": "torch", "num_workers": "2", "batch_size": "${oc.env:LF_TEST_WORKERS}"},
        }
    )
    with pytest.raises(ConfigError) as caught:
        validate(node)
    messages = {p.path: p.message for p in caught.value.problems}
    assert messages["loader.num_workers"] == "must be a whole number, got '2'"
    assert messages["loader.batch_size"].endswith(
        "the interpolation ${oc.env:LF_TEST_WORKERS} gives a string; write "
        "${oc.decode:${oc.env:LF_TEST_WORKERS}} to read it as a number "
        """(on the command line, quoted: 'loader.batch_size="${oc.decode:${oc.env:LF_TEST_WORKERS}}"')"""
    )


THREE_ITEMS = """
import torch


class ThreeItems(torch.utils.data.Dataset):
    def __len__(self):
        return 3

    def __getitem__(self, index):
        return {"index": torch.tensor(index)}


class ThreeStream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter({"index": torch.tensor(index)} for index in range(3))
"""


def _in_folder(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command as its console script runs it: a launcher elsewhere (``sys.path[0]`` is its folder),
    started in ``tmp_path/work``, whose modules are on no ``PYTHONPATH``."""
    launcher, work = tmp_path / "bin" / "loaderfactory_launcher.py", tmp_path / "work"
    launcher.parent.mkdir()
    launcher.write_text("from loaderfactory.hydra.cli import main\n\nmain()\n")
    work.mkdir()
    (work / "lf_three_items.py").write_text(textwrap.dedent(THREE_ITEMS))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(launcher), *args, f"hydra.run.dir={tmp_path / 'run'}"]
    return subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=100)


def test_a_target_module_in_the_current_folder_imports(tmp_path: Path) -> None:
    """``+dataset={_target_: mod.Class}`` finds ``mod.py`` in the folder the command runs in."""
    result = _in_folder(
        tmp_path, "run.mode=validate", "~dataset", "+dataset={_target_: lf_three_items.ThreeItems}"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("config OK: dataset=custom")


def test_a_missing_target_module_says_why_and_where_python_looked(tmp_path: Path) -> None:
    """A module that is nowhere: its name, Python's ModuleNotFoundError and the sys.path hint, exit 2."""
    result = _in_folder(tmp_path, "run.mode=validate", "~dataset", "+dataset={_target_: lf_nowhere.Data}")
    assert result.returncode == 2, result.stderr
    assert (
        "dataset._target_: cannot import module 'lf_nowhere' for 'lf_nowhere.Data': "
        "ModuleNotFoundError: No module named 'lf_nowhere'. Python looks for it on sys.path" in result.stderr
    )
    assert "add that folder to PYTHONPATH" in result.stderr


@pytest.mark.parametrize("batches", [[], ["run.batches=5"]], ids=["epochs", "batches"])
def test_a_run_that_draws_no_batch_fails_naming_the_fields(tmp_path: Path, batches: list[str]) -> None:
    """A stream of 3 items (no ``len()``, so no check can see it coming) in batches of 8 with drop_last:
    exit 2 naming the batch size and drop_last; no report and never ``batches/s None``."""
    result = _in_folder(
        tmp_path,
        "~dataset",
        "+dataset={_target_: lf_three_items.ThreeStream}",
        "loader.batch_size=8",
        "loader.drop_last=true",
        "run.progress=false",
        *batches,
    )
    assert result.returncode == 2, result.stderr
    assert (
        "loader: the run drew no batch: the dataset has an unknown number of items, loader.batch_size=8, "
        "loader.drop_last=true;" in result.stderr
    )
    assert "None" not in result.stdout + result.stderr
    assert not (tmp_path / "run" / "report.json").exists()


def test_an_empty_epoch_of_a_sized_target_dataset_is_refused_before_the_run(tmp_path: Path) -> None:
    """3 items by ``len()`` in batches of 8 with drop_last: refused once built, before the first batch."""
    result = _in_folder(
        tmp_path,
        "~dataset",
        "+dataset={_target_: lf_three_items.ThreeItems}",
        "loader.batch_size=8",
        "loader.drop_last=true",
        "run.progress=false",
    )
    assert result.returncode == 2, result.stderr
    assert (
        "loader.drop_last: an epoch has no batches: len(dataset)=3 items fewer than loader.batch_size=8"
        in result.stderr
    )
    assert not (tmp_path / "run" / "report.json").exists()
