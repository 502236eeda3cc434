"""The ``loaderfactory`` command's Hydra app: builds a loader from config, runs it, reports.

Started by :func:`loaderfactory.hydra.cli.main` (the command's uses are listed there), which ends
it on Ctrl-C or a closed stdout. ``validate``, ``schema`` and ``--help`` import no torch and write
no output folder.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from loaderfactory.config import registry
from loaderfactory.config.specs.pipeline import LoaderSpec
from loaderfactory.errors import ConfigError, ConfigProblem
from loaderfactory.hydra.argv import open_config_keys, put_cwd_on_path, shown_overrides, with_light_overrides
from loaderfactory.hydra.compose import CLI_CONFIG, cli_config_dir
from loaderfactory.hydra.exits import OutputClosed, job_began, stdout_closed
from loaderfactory.hydra.job import interrupted_early, pack_job, run_job
from loaderfactory.intake import validate

log = logging.getLogger("loaderfactory")


@dataclass(frozen=True)
class Job:
    """How one job of this process ended (a ``-m`` sweep runs several)."""

    number: int
    overrides: str
    ok: bool
    detail: str


_jobs: list[Job] = []
_typed: list[str] = []
"""The command line as the user typed it (before :func:`open_config_keys`)."""


def run_app(cfg: DictConfig) -> dict[str, Any] | None:
    """The Hydra task: validate, then run or stop as ``run.mode`` says. Returns the report.

    A config mistake prints every problem and exits 2; in a ``-m`` sweep it fails that job only,
    records the problems in the job's report, and the sweep goes on to a summary. Ctrl-C in a run
    writes a report marked interrupted, whenever it comes; stdout's reader gone ends it quietly.
    """
    job_began(str(cfg.get("run", {}).get("mode", "run")))
    try:
        return _run_mode(cfg)
    except BrokenPipeError:
        if stdout_closed():  # `loaderfactory run.mode=plan | head -1`
            raise OutputClosed() from None
        raise
    except KeyboardInterrupt:
        run = cfg.get("run", {})
        if run.get("mode", "run") != "run":
            raise
        config = OmegaConf.to_container(cfg, resolve=False)
        out_dir = Path(HydraConfig.get().runtime.output_dir)
        raise interrupted_early(out_dir, run.get("report", "report.json"), config) from None  # type: ignore[arg-type]  # a dict: cfg is a DictConfig


def _run_mode(cfg: DictConfig) -> dict[str, Any] | None:
    if cfg.get("run", {}).get("mode") == "schema":
        from loaderfactory.config.schema import json_schema

        print(json.dumps(json_schema(), indent=2))
        return None
    try:
        spec = validate(cfg)
        if spec.run.mode == "validate":
            print(f"config OK: {_slots(spec)}")
            return None
        if spec.run.mode == "plan":
            _plan(spec)
            return None
        if spec.run.mode == "index":
            _index(spec)
            return None
        if spec.run.mode == "pack":
            packed = pack_job(spec, _say)
            _record(
                True, f"{packed['shards']} shard(s), {packed['samples']} samples, {packed['bytes']} bytes"
            )
            return packed
        summary = run_job(spec, Path(HydraConfig.get().runtime.output_dir), _say)
    except ConfigError as err:
        _refuse(err)
        return None
    except Exception as err:
        if _is_read_error(err):
            _read_failed(err)
            return None
        if not _sweeping():
            raise
        log.error("job failed:\n%s", "".join(traceback.format_exception(err)))
        _record(False, f"{type(err).__name__}: {err}")
        return None
    peak = f"peak with workers ({summary['memory_measure'].upper()}) {summary['peak_memory_mb']} MiB"
    _record(True, f"{summary.get('batches_per_s')} batches/s, {peak}")
    return summary


def _plan(spec: LoaderSpec) -> None:
    """Build (which starts nothing), print what would run and hold, release."""
    from loaderfactory.factory import build_loader
    from loaderfactory.plan import format_plan, make_plan

    with build_loader(spec) as loader:
        _say(f"config OK: {_slots(spec)}\n{format_plan(make_plan(loader))}")


def _index(spec: LoaderSpec) -> None:
    """Read every shard of ``dataset: shards`` once and write their index; say where and the counts."""
    from loaderfactory.config.specs.shards import ShardsDatasetSpec

    if not isinstance(spec.dataset, ShardsDatasetSpec):
        kind = getattr(spec.dataset, "kind", "custom" if spec.dataset is not None else None)
        message = f"run.mode=index indexes shards: set dataset=shards dataset.urls=... (dataset is {kind})"
        raise ConfigError(ConfigProblem("run.mode", message))
    from loaderfactory.builders.shards import index_shards

    where, shards = index_shards(spec.dataset, progress=spec.run.progress)
    samples, size = sum(s.samples for s in shards), sum(s.bytes for s in shards)
    _say(f"wrote {where}: {len(shards)} shard(s), {samples} sample(s), {size} bytes")


def _slots(spec: LoaderSpec) -> str:
    """``dataset=synthetic, loader=torch``: each present slot's kind (``custom`` for a ``_target_``)."""
    present = [s for s in registry.SLOTS if spec.slot(s) is not None]
    return ", ".join(f"{s}={getattr(spec.slot(s), 'kind', 'custom')}" for s in present)


def _sweeping() -> bool:
    return HydraConfig.get().mode == RunMode.MULTIRUN


def _record(ok: bool, detail: str) -> None:
    hydra_cfg = HydraConfig.get()
    overrides = " ".join(shown_overrides(hydra_cfg.overrides.task, _typed)) or "(no overrides)"
    number = OmegaConf.select(hydra_cfg, "job.num", default=0, throw_on_missing=False)  # type: ignore[arg-type]  # a DictConfig at runtime; ??? in a single run
    _jobs.append(Job(int(number or 0), overrides, ok, detail))


def _say(text: str) -> None:
    """To the job's log (Hydra's ``<job>.log``) and the console, once."""
    log.info(text)
    if not _logs_to_console():
        print(text)


def _logs_to_console() -> bool:
    if not log.isEnabledFor(logging.INFO):
        return False
    logger: logging.Logger | None = log
    while logger is not None:
        for handler in logger.handlers:
            stream = getattr(handler, "stream", None)
            if stream in (sys.stdout, sys.stderr) and handler.level <= logging.INFO:
                return True
        logger = logger.parent if logger.propagate else None
    return False


def _refuse(err: ConfigError) -> None:
    print(f"loaderfactory: invalid config\n{err}", file=sys.stderr)
    if not _sweeping():
        raise SystemExit(2) from None
    from loaderfactory.report import write_report

    errors = [{"path": p.path, "message": p.message} for p in err.problems]
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    write_report({"error": "invalid config", "problems": errors}, out_dir / "report.json")
    _record(False, "; ".join(str(p) for p in err.problems))


def _is_read_error(err: Exception) -> bool:
    """True for the errors of a shard that could not be read (imported now: the shards import torch)."""
    from loaderfactory.shards.errors import READ_ERRORS

    return isinstance(err, READ_ERRORS)


def _read_failed(err: Exception) -> None:
    """A shard that could not be read mid-run (a server gone after the retries, a truncated shard):
    its message alone, which names the URL and the sample, and exit 1; in a sweep, that job fails
    and its report says why."""
    message = worker_error_message(err)
    print(f"loaderfactory: reading the shards failed ({type(err).__name__}):\n{message}", file=sys.stderr)
    if not _sweeping():
        raise SystemExit(1) from None
    from loaderfactory.report import write_report

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    write_report({"error": "reading the shards failed", "message": message}, out_dir / "report.json")
    _record(False, f"{type(err).__name__}: {message}")


def worker_error_message(err: BaseException) -> str:
    """``err``'s own message, without the traceback torch wraps around an error raised in a worker
    ("Caught X in DataLoader worker process 0. Original Traceback ... X: message")."""
    text = str(err)
    last_line = f"{type(err).__module__}.{type(err).__qualname__}: "
    if text.startswith("Caught ") and last_line in text:
        return text.rsplit(last_line, 1)[1].strip()
    return text


def summary_lines(jobs: list[Job]) -> list[str]:
    """One line per job of a sweep: number, outcome, overrides, figures or the error."""
    return [f"  job {j.number}: {'ok    ' if j.ok else 'FAILED'} {j.overrides}: {j.detail}" for j in jobs]


def run_command() -> None:
    """The command, from ``sys.argv``; :func:`loaderfactory.hydra.cli.main` runs it."""
    _typed[:] = sys.argv[1:]
    sys.argv[1:] = open_config_keys(with_light_overrides(_typed))
    put_cwd_on_path()
    _check_plugin_configs()
    OmegaConf.register_new_resolver(KINDS_RESOLVER, kinds_help, replace=True)  # --help's Kinds section
    app = hydra.main(config_path=str(cli_config_dir()), config_name=CLI_CONFIG, version_base="1.3")(run_app)
    app()
    if len(_jobs) > 1 or any(not job.ok for job in _jobs):
        failed = sum(not job.ok for job in _jobs)
        print(f"loaderfactory: {len(_jobs)} jobs, {failed} failed", file=sys.stderr)
        print("\n".join(summary_lines(_jobs)), file=sys.stderr)
        if failed:
            raise SystemExit(1)


def _check_plugin_configs() -> None:
    """A plugin's broken ``loaderfactory.configs`` entry point: one line naming it, exit 1, rather than
    a traceback from inside Hydra's search-path plugin."""
    from loaderfactory.hydra.compose import plugin_config_dirs

    try:
        plugin_config_dirs()
    except (FileNotFoundError, ValueError) as err:
        print(err, file=sys.stderr)  # "loaderfactory plugin 'name' (entry point ...): ..."
        raise SystemExit(1) from None


KINDS_RESOLVER = "loaderfactory.kinds"
"""The resolver ``${loaderfactory.kinds:}`` in ``hydra/help/loaderfactory.yaml``: :func:`kinds_help`."""
_HELP_WIDTH = 100


def kinds_help() -> str:
    """The Kinds section of ``--help``: every registered kind of each table, one line (or more) per table.

    Loads the plugins, which imports them: a plugin's kinds show with its package,
    ``sine_waves (loaderfactory_sine)``. A plugin that fails to load is named at the end of the
    section rather than taking the whole help page down.
    """
    problem = ""
    try:
        registry.load_plugins()
    except ImportError as err:  # plugins after the broken one are not loaded either
        problem = f"\n(some plugins' kinds are missing: {err})"
    head = max(len(table) for table in registry.TABLES) + 2
    lines = []
    for table in registry.TABLES:
        known = registry.available(table)
        items = [_kind_label(kind, registry.lookup(table, kind).spec) for kind in known if kind[0] != "_"]
        if "_target_" in known:
            items.append("or a _target_")
        lines.extend(_wrap_items(f"{table}:".ljust(head), items or ["(none)"]))
    return ("\n".join(lines) + problem).replace("$", "$$")  # Hydra fills the template with string.Template


def _kind_label(kind: str, spec: type) -> str:
    package = spec.__module__.split(".")[0]
    return kind if package == "loaderfactory" else f"{kind} ({package})"


def _wrap_items(head: str, items: list[str]) -> list[str]:
    """``head`` then the items, comma-separated, broken between items at :data:`_HELP_WIDTH`."""
    lines, on_line = [head[:-1]], 0  # each item brings its leading space
    for number, item in enumerate(items, 1):
        piece = item if number == len(items) else f"{item},"
        if on_line and len(lines[-1]) + 1 + len(piece) > _HELP_WIDTH:
            lines.append(" " * (len(head) - 1))
            on_line = 0
        lines[-1] += f" {piece}"
        on_line += 1
    return lines
