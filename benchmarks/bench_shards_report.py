"""bench_shards.py's tables (throughput, resume, goals) and its plot of items/s per row."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

PEERS = ("wds", "litdata", "mosaic")
BEFORE = "ours@before"
"""The ours runs made with another checkout's loaderfactory (``bench_shards.py --before``)."""


def _rate(result: dict[str, Any]) -> float | None:
    if "items" not in result or not result.get("seconds"):
        return None
    return float(result["items"]) / float(result["seconds"])


def _order(entry: dict[str, Any]) -> str:
    return str(entry.get("order", "stored"))


def _cells(result: dict[str, Any]) -> list[str]:
    rate = _rate(result)
    if rate is None:
        return [f"n/a: {result.get('na', '?')}"]
    megabytes = result["bytes"] / 1e6 / result["seconds"]
    first = "" if result.get("first_s") is None else f"{result['first_s']:.2f}"
    pss = "" if not result.get("pss") else f"{result['pss'] / 2**20:.0f}"
    same = "" if result.get("same_shard") is None else f"{result['same_shard']:.3f}"
    if result.get("ids_exact") is False:
        same += " (ids not exact)"
    return [f"{rate:,.0f}", f"{megabytes:,.0f}", first, pss, same]


def print_tables(results: list[dict[str, Any]]) -> None:
    """The throughput table, the resume table and how ours compares with the best peer per row."""
    print(
        "\n| set | where | order | workers | library | items/s | MB/s | first batch s | peak PSS MiB"
        " | same shard |"
    )
    print("|---|---|---|---|---|---:|---:|---:|---:|---:|")
    for entry in sorted(results, key=lambda entry: _order(entry) != "stored"):  # stable: stored first
        if entry["mode"] == "resume":
            continue
        head = [entry["set"], entry["where"], _order(entry), str(entry["workers"]), entry["library"]]
        print("| " + " | ".join(head + _cells(entry["result"])) + " |")
    print("\n| set | library | workers | first batch, fresh s | after resume at 90% s | ratio |")
    print("|---|---|---|---:|---:|---:|")
    for entry in results:
        if entry["mode"] != "resume":
            continue
        result = entry["result"]
        head = f"| {entry['set']} | {entry['library']} | {entry['workers']} |"
        if "na" in result:
            print(f"{head} n/a: {result['na']} | | |")
            continue
        ratio = result["first_s"] / result["fresh_first_s"]
        print(f"{head} {result['fresh_first_s']:.2f} | {result['first_s']:.2f} | {ratio:.2f} |")
    _print_goals(results)


def _print_goals(results: list[dict[str, Any]]) -> None:
    rows: dict[tuple[str, str, str, int], dict[str, float]] = defaultdict(dict)
    for entry in sorted(results, key=lambda entry: _order(entry) != "stored"):
        rate = _rate(entry["result"])
        if entry["mode"] == "epoch" and rate is not None:
            rows[(entry["set"], entry["where"], _order(entry), entry["workers"])][entry["library"]] = rate
    print("\n| set | where | order | workers | ours / best peer (items/s) | best peer |")
    print("|---|---|---|---|---:|---|")
    for (name, where, order, workers), rates in rows.items():
        peers = {lib: rate for lib, rate in rates.items() if lib in PEERS}
        if "ours" not in rates or not peers:
            continue
        best = max(peers, key=lambda lib: peers[lib])
        print(f"| {name} | {where} | {order} | {workers} | {rates['ours'] / peers[best]:.2f} | {best} |")
    compared = [(row, rates) for row, rates in rows.items() if "ours" in rates and BEFORE in rates]
    if compared:
        print("\n| set | where | order | workers | ours, before | ours, this checkout | after / before |")
        print("|---|---|---|---|---:|---:|---:|")
        for (name, where, order, workers), rates in compared:
            before, after = rates[BEFORE], rates["ours"]
            print(
                f"| {name} | {where} | {order} | {workers} | {before:,.0f} | {after:,.0f}"
                f" | {after / before:.2f} |"
            )


def plot(results: list[dict[str, Any]], path: str) -> None:
    """A horizontal bar per row (set, where, workers, library): items/s, one panel per item size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = sorted({entry["set"] for entry in results})
    figure, axes = plt.subplots(1, len(sets), figsize=(7 * len(sets), 10), squeeze=False)
    colours = {"ours": "C0", "wds": "C1", "litdata": "C2", "mosaic": "C3"}
    for axis, name in zip(axes[0], sets, strict=True):
        labels, rates, colour = [], [], []
        for entry in results:
            rate = _rate(entry["result"])
            if entry["set"] != name or entry["mode"] == "resume":
                continue
            labels.append(f"{entry['where']} {_order(entry)} w{entry['workers']} {entry['library']}")
            rates.append(rate or 0.0)
            colour.append(colours.get(entry["library"], "grey"))
        axis.barh(range(len(rates)), rates, color=colour)
        axis.set_yticks(range(len(rates)), labels, fontsize=7)
        axis.invert_yaxis()
        axis.set_xscale("log")
        axis.set_xlabel("items/s (log)")
        axis.set_title(f"{name} items")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
