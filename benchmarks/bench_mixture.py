"""loaderfactory's mixture against torchdata.nodes and litdata, on the same three in-memory sources.

    PYTHONPATH=$PWD /work/benchvenv/bin/python benchmarks/bench_mixture.py [--quick] [--repeats 3]

Needs the benchmark environment (benchmarks/requirements-bench.txt; torchdata installed there with
``pip install --no-deps torchdata``, which keeps its torch) and ``PYTHONPATH=<this checkout>``.
Three sources of ``--sizes`` items (200,000 / 100,000 / 50,000), each item a dict
``{"source": s, "index": i}``, mixed by ``--weights`` (0.5 / 0.3 / 0.2), read in batches of
``--batch`` (256), all in this process with ``torch.set_num_threads(1)``:

- draws/s over ``--draws`` draws (200,000) of: ``MixtureDataset.__getitems__`` over consecutive
  positions, and ``build_loader`` (torch kind, workers 0) over it; the largest source alone read the
  same two ways (its own ``__getitems__``-style list reads in a new random order each pass, and
  ``build_loader`` shuffled), which gives our overhead (time per draw, mixture / one source);
  ``torchdata.nodes.MultiNodeWeightedSampler`` over ``IterableWrapper`` sources, item by item and
  batched + collated through ``Loader``; litdata's ``CombinedStreamingDataset`` (weights,
  ``iterate_over_all=False``) over the sources written once as litdata chunks under ``--data``, read
  by ``StreamingDataLoader`` (workers 0, each source shuffled).
- resume at ``--positions`` (10^3, 10^5, 10^7) of one long epoch (2 × the largest position): the
  time from building a new loader to its first batch, given a state at that position. Ours: the
  loader (and the mixture alone: built, then the batch at the position read); the resumed batch is
  checked to be the mixture's positions from there. torchdata: the sampler's ``state_dict()`` after
  that many draws, restored by ``reset(state)``. litdata: ``load_state_dict`` of a state saved after
  that many draws; its epoch here ends near 250,000 draws (when a source runs out), so a larger
  position uses the state at the largest one reached with its per-source counts scaled up (the
  replay litdata runs on restore iterates over those counts).

Rows are interleaved, ``--repeats`` rounds, each row's median; a row that took over 10 s in the
first round is not repeated. Prints one line per run, tables, writes JSON (``--out``) and a plot
(``--plot``: draws/s bars, resume time against position).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_mixture_libs as libs

SLOW_S = 10.0
"""A row whose first round took longer is not repeated."""
THROUGHPUT = {
    ("ours", "dataset"): libs.ours_dataset,
    ("one source", "dataset"): libs.one_source_dataset,
    ("torchdata", "items"): libs.torchdata_items,
    ("ours", "loader"): libs.ours_loader,
    ("one source", "loader"): libs.one_source_loader,
    ("torchdata", "loader"): libs.torchdata_loader,
    ("litdata", "loader"): libs.litdata_loader,
}
PEERS = {"torchdata": "torchdata.nodes", "litdata": "litdata"}
LITDATA_REACH = 200_000
"""Positions litdata's combined epoch reaches here (it ends when ``books`` runs out, near 250,000)."""


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="200000,100000,50000", help="items per source")
    parser.add_argument("--weights", default="0.5,0.3,0.2")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--draws", type=int, default=200_000, help="draws per throughput run")
    parser.add_argument("--positions", default="1e3,1e5,1e7", help="resume positions")
    parser.add_argument("--libraries", default="ours,torchdata,litdata")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; each row's median")
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "bench_mixture_data"))
    parser.add_argument("--out", default="bench_mixture.json")
    parser.add_argument("--plot", default="bench_mixture.png")
    parser.add_argument("--quick", action="store_true", help="--draws 50000, positions up to 1e6, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.draws, args.positions, args.repeats = 50_000, "1e3,1e5,1e6", 1
    return args


def _rounds(
    rows: list[tuple[str, Callable[[], tuple[float, float, str]]]], repeats: int
) -> dict[str, list[float]]:
    """Each row's figures over ``repeats`` interleaved rounds, one progress line per run."""
    figures: dict[str, list[float]] = {name: [] for name, _ in rows}
    first_s: dict[str, float] = {}
    total, number = len(rows) * repeats, 0
    for round_ in range(repeats):
        for name, run in rows:
            number += 1
            if round_ and first_s.get(name, 0.0) > SLOW_S:
                print(f"[{number}/{total}] {name}: not repeated (over {SLOW_S:.0f} s)", flush=True)
                continue
            figure, seconds, line = run()
            figures[name].append(figure)
            first_s.setdefault(name, seconds)
            print(f"[{number}/{total}] {name}: {line}", flush=True)
    return figures


def throughput(
    setup: libs.Setup, args: argparse.Namespace, rows: list[tuple[str, str]]
) -> list[dict[str, Any]]:
    """draws/s of each row, the median of its rounds."""
    for key in rows:  # warm: imports, first allocations
        THROUGHPUT[key](setup, setup.batch * 4)

    def runner(key: tuple[str, str]) -> Callable[[], tuple[float, float, str]]:
        def run() -> tuple[float, float, str]:
            seconds, draws = libs.timed(lambda: THROUGHPUT[key](setup, args.draws))
            return draws / seconds, seconds, f"{draws / seconds:,.0f} draws/s ({seconds:.2f} s)"

        return run

    figures = _rounds([(" ".join(key), runner(key)) for key in rows], args.repeats)
    return [
        {
            "library": library,
            "level": level,
            "draws_per_s": statistics.median(figures[f"{library} {level}"]),
            "repeats": figures[f"{library} {level}"],
        }
        for library, level in rows
    ]


def resume_rows(setup: libs.Setup, positions: list[int], libraries: list[str]) -> list[dict[str, Any]]:
    """Every resume row: library, position, the function timed, a check of its result, a note."""
    rows: list[dict[str, Any]] = []
    for position in positions:
        if "ours" in libraries:
            run, exact = libs.ours_resume(setup, position)
            rows.append({"library": "ours loader", "position": position, "run": run, "check": exact})
            run = libs.ours_dataset_resume(setup, position)
            rows.append({"library": "ours dataset", "position": position, "run": run})
        if "torchdata" in libraries:
            print(f"torchdata: drawing {position:,} to make its state", flush=True)
            rows.append(
                {"library": "torchdata", "position": position, "run": libs.torchdata_resume(setup, position)}
            )
    if "litdata" in libraries:
        states = libs.litdata_states(setup, [p for p in positions if p <= LITDATA_REACH])
        for position in positions:
            row: dict[str, Any] = {"library": "litdata", "position": position}
            state = states.get(position)
            if state is None:
                largest = max(states)
                state = libs.scaled_state(states[largest], position)
                row["note"] = f"counts of the state at {largest:,} scaled up"
            rows.append({**row, "run": libs.litdata_resume(setup, state)})
    return rows


def resume(args: argparse.Namespace, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Seconds from a new loader to its first batch, the median of each row's rounds."""
    checks: dict[str, bool] = {}

    def runner(row: dict[str, Any], name: str) -> Callable[[], tuple[float, float, str]]:
        def run() -> tuple[float, float, str]:
            seconds, first = libs.timed(row["run"])
            if "check" in row:
                checks[name] = checks.get(name, True) and row["check"](first)
            return (
                seconds,
                seconds,
                f"{seconds * 1e3:,.1f} ms" + ("" if checks.get(name, True) else " (NOT the right batch)"),
            )

        return run

    named = [(f"resume {row['library']} at {row['position']:,}", row) for row in rows]
    figures = _rounds([(name, runner(row, name)) for name, row in named], args.repeats)
    return [
        {
            "library": row["library"],
            "position": row["position"],
            "seconds": statistics.median(figures[name]),
            "repeats": figures[name],
            **({"exact": checks[name]} if name in checks else {}),
            **({"note": row["note"]} if "note" in row else {}),
        }
        for name, row in named
    ]


def print_tables(rates: list[dict[str, Any]], resumed: list[dict[str, Any]]) -> dict[str, float]:
    """The draws/s table, our overhead over one source, the resume table; returns the overheads."""
    print("\n| library | level | draws/s |\n|---|---|---:|")
    for row in rates:
        print(f"| {row['library']} | {row['level']} | {row['draws_per_s']:,.0f} |")
    rate = {(row["library"], row["level"]): row["draws_per_s"] for row in rates}
    overheads = {
        level: rate["one source", level] / rate["ours", level]
        for level in ("dataset", "loader")
        if ("ours", level) in rate and ("one source", level) in rate
    }
    for level, ratio in overheads.items():
        print(f"ours / one source alone, time per draw, {level}: {ratio:.2f}x")
    positions = sorted({row["position"] for row in resumed})
    print("\n| resume: first batch | " + " | ".join(f"at {p:,.0e}" for p in positions) + " |")
    print("|---|" + "---:|" * len(positions))
    for library in dict.fromkeys(row["library"] for row in resumed):
        cells = {row["position"]: row for row in resumed if row["library"] == library}
        print(f"| {library} | " + " | ".join(_resume_cell(cells.get(p)) for p in positions) + " |")
    for row in resumed:
        if "note" in row:
            print(f"{row['library']} at {row['position']:,}: {row['note']}")
        if row.get("exact") is False:
            print(f"{row['library']} at {row['position']:,}: the resumed batch was NOT the mixture's")
    return overheads


def _resume_cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    seconds = row["seconds"]
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def plot(rates: list[dict[str, Any]], resumed: list[dict[str, Any]], path: str) -> None:
    """Left: draws/s per row; right: resume time against position (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = [f"{row['library']}\n{row['level']}" for row in rates]
    colours = [
        "tab:blue"
        if row["library"] == "ours"
        else "tab:grey"
        if row["library"] == "one source"
        else "tab:orange"
        for row in rates
    ]
    left.barh(labels, [row["draws_per_s"] for row in rates], color=colours)
    left.invert_yaxis()
    left.set_xlabel("draws/s (batches of 256, one process)")
    left.set_title("3-source mixture, in-memory items")
    for library in dict.fromkeys(row["library"] for row in resumed):
        points = sorted((row["position"], row["seconds"]) for row in resumed if row["library"] == library)
        right.plot(*zip(*points, strict=True), marker="o", label=library)
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("resume position (draws into the epoch)")
    right.set_ylabel("new loader to first batch, s")
    right.set_title("resume")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    args = _arguments()
    import torch

    torch.set_num_threads(1)
    positions = [int(float(p)) for p in args.positions.split(",")]
    setup = libs.Setup(
        sizes=[int(n) for n in args.sizes.split(",")],
        weights=[float(w) for w in args.weights.split(",")],
        batch=args.batch,
        data=Path(args.data),
        resume_epoch=2 * max(positions),
    )
    wanted = args.libraries.split(",")
    missing = {
        name: PEERS[name] for name in wanted if name in PEERS and importlib.util.find_spec(name) is None
    }
    for name, module in missing.items():
        print(f"{name}: left out, {module} is not installed in {sys.executable}", flush=True)
    libraries = [name for name in wanted if name not in missing]
    if "litdata" in libraries:
        libs.litdata_folders(setup)
    rows = [
        key for key in THROUGHPUT if key[0] in libraries or (key[0] == "one source" and "ours" in libraries)
    ]
    rates = throughput(setup, args, rows)
    resumed = resume(args, resume_rows(setup, positions, libraries))
    overheads = print_tables(rates, resumed)
    results = {"args": vars(args), "throughput": rates, "overhead": overheads, "resume": resumed}
    Path(args.out).write_text(json.dumps(results, indent=1))
    plot(rates, resumed, args.plot)
    print(f"wrote {args.out} and {args.plot}")


if __name__ == "__main__":
    main()
