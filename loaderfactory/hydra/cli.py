"""The ``loaderfactory`` command: a Hydra app that builds a loader from config, runs it, reports.

loaderfactory prefetch.buffer_size=4 run.batches=200
loaderfactory -m prefetch.buffer_size=1,4,16
loaderfactory run.mode=validate loader.batch_size=0    # prints every problem, exits 2
loaderfactory run.mode=schema > loaderfactory.schema.json
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from loaderfactory.config.schema import json_schema
from loaderfactory.config.specs.pipeline import LoaderSpec
from loaderfactory.config.validation import validate
from loaderfactory.errors import ConfigError
from loaderfactory.factory import build_loader
from loaderfactory.hydra.compose import CLI_CONFIG, cli_config_dir
from loaderfactory.loader import Loader
from loaderfactory.report import format_report, plot_waits, write_report


def run_app(cfg: DictConfig) -> dict[str, Any] | None:
    """The Hydra task: validate, then run or stop as ``run.mode`` says. Returns the report.

    A config mistake prints every problem and exits 2; in a ``-m`` sweep it fails that job only,
    records the problems in the job's report, and the sweep goes on.
    """
    if cfg.get("run", {}).get("mode") == "schema":
        print(json.dumps(json_schema(), indent=2))
        return None
    try:
        spec = validate(cfg)
        if spec.run.mode == "validate":
            print(f"config OK: {_slots(spec)}")
            return None
        loader = build_loader(spec)
        with loader:
            summary = consume(loader, spec)
    except ConfigError as err:
        _refuse(err)
        return None
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    summary["config"] = spec.model_dump(mode="json", by_alias=True)
    write_report(summary, out_dir / spec.run.report)
    if spec.run.plots:
        summary["plots"] = [str(p) for p in write_plots(loader, out_dir)]
        write_report(summary, out_dir / spec.run.report)
    print(format_report(summary))
    print(f"report: {out_dir / spec.run.report}")
    return summary


def _slots(spec: LoaderSpec) -> str:
    present = [s for s in ("dataset", "queue", "loader", "stream", "prefetch") if spec.slot(s) is not None]
    return ", ".join(f"{s}={getattr(spec.slot(s), 'kind', 'custom')}" for s in present)


def _refuse(err: ConfigError) -> None:
    print(f"loaderfactory: invalid config\n{err}", file=sys.stderr)
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        raise SystemExit(2) from None
    errors = [{"path": p.path, "message": p.message} for p in err.problems]
    write_report(
        {"error": "invalid config", "problems": errors}, Path(hydra_cfg.runtime.output_dir) / "report.json"
    )


def write_plots(loader: Loader, out_dir: Path) -> list[Path]:
    """The wait histogram, plus whatever each component draws with its ``plot_telemetry(out_dir)``."""
    paths = []
    if loader.stats.waits:
        paths.append(plot_waits(loader.stats.waits, out_dir / "wait_hist.png"))
    for component in loader.components.values():
        plot = getattr(component, "plot_telemetry", None)
        if callable(plot):
            paths.extend(plot(out_dir))
    return paths


def consume(loader: Loader, spec: LoaderSpec) -> dict[str, Any]:
    """Draw ``run.batches`` batches (or ``run.epochs`` epochs), sleeping ``run.step_ms`` per batch."""
    from tqdm import tqdm

    run = spec.run
    try:
        per_epoch: int | None = len(loader)
    except TypeError:
        per_epoch = None
    total = run.batches if run.batches is not None else (per_epoch * run.epochs if per_epoch else None)
    batches = _batches(loader, run.batches, run.epochs)
    step = run.step_ms / 1000
    with tqdm(total=total, unit="batch", disable=not run.progress, file=sys.stderr) as bar:
        for _ in batches:
            if step:
                time.sleep(step)
            bar.update()
    return loader.telemetry()


def _batches(loader: Loader, limit: int | None, epochs: int) -> Any:
    if limit is None:
        return itertools.chain.from_iterable(loader for _ in range(epochs))

    # Keep drawing epochs until `limit` batches; an empty epoch ends the run instead of spinning.
    def endless() -> Any:
        while True:
            empty = True
            for batch in loader:
                empty = False
                yield batch
            if empty:
                return

    return itertools.islice(endless(), limit)


def main() -> None:
    """Console entry point (``loaderfactory``)."""
    app = hydra.main(config_path=str(cli_config_dir()), config_name=CLI_CONFIG, version_base="1.3")(run_app)
    app()
