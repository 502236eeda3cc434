"""The mixture's counts and blocks: exact, never decreasing, on target at every position, random
where they should be, and the same however they are reached."""

from __future__ import annotations

import numpy as np
import pytest

from loaderfactory.mixture.blocks import Blocks
from loaderfactory.mixture.counts import Counts
from loaderfactory.mixture.schedule import segments

CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47}
"""The chi-square 99.9th percentile by degrees of freedom: a fair draw exceeds it once in 1000."""
SCHEDULES = {
    "fixed": ([(0, [0.5, 0.3, 0.2])], "hold"),
    "one tiny": ([(0, [0.97, 0.02, 0.01])], "hold"),
    "held": ([(0, [0.9, 0.1, 0.0]), (3000, [0.1, 0.2, 0.7]), (7000, [0.0, 0.5, 0.5])], "hold"),
    "linear": ([(0, [0.9, 0.1, 0.0]), (3000, [0.1, 0.2, 0.7]), (7000, [0.0, 0.5, 0.5])], "linear"),
}


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
def test_counts_sum_to_the_position_never_decrease_and_stay_on_target(schedule: str) -> None:
    points, interpolate = SCHEDULES[schedule]
    weights = segments(points, interpolate)
    positions = np.arange(12_001)
    counts = Counts(weights).at(positions)
    steps = np.diff(counts, axis=0)
    assert (counts.sum(axis=1) == positions).all()
    assert ((steps == 0) | (steps == 1)).all()  # one position, one draw
    expected = np.stack([weights.expected(int(k)) for k in positions[::7]])
    assert np.abs(counts[::7] - expected).max() < len(points[0][1])  # within a draw per source


def test_a_weight_of_zero_is_never_drawn_while_it_holds() -> None:
    weights = segments([(0, [1.0, 0.0]), (500, [0.0, 1.0])], "hold")
    counts = Counts(weights).at(np.asarray([500, 1000]))
    assert counts.tolist() == [[500, 0], [500, 500]]


def test_counts_far_along_the_timeline_cost_no_more_than_near_its_start() -> None:
    """Resume cost: a position's counts come from the schedule, not from the draws before it."""
    counts = Counts(segments([(0, [0.5, 0.3, 0.2])]))
    far = counts.at(10**12 + 3)
    assert far.sum() == 10**12 + 3
    assert np.abs(far - np.asarray([0.5, 0.3, 0.2]) * (10**12 + 3)).max() < 3


def block_sources(blocks: Blocks, length: int, epoch: int = 0) -> np.ndarray:
    return np.concatenate([blocks.find(epoch, 0, length, k).sources for k in range(0, length, blocks.chunk)])


def test_random_draws_pass_a_chi_square_test_against_the_weights() -> None:
    """20,000 draws, counted in 40 windows of 500: each window's counts fit the weights."""
    weights = np.asarray([0.5, 0.3, 0.2])
    sources = block_sources(Blocks(Counts(segments([(0, weights)])), 1000, seed=3), 20_000)
    for window in sources.reshape(40, 500):
        observed = np.bincount(window, minlength=3)
        statistic = ((observed - 500 * weights) ** 2 / (500 * weights)).sum()
        assert statistic < CHI2_999[2]


def test_a_scheduled_mixture_draws_each_window_by_its_weights() -> None:
    points = [(0, [0.8, 0.2]), (10_000, [0.2, 0.8])]
    weights = segments(points, "linear")
    sources = block_sources(Blocks(Counts(weights), 1000, seed=3), 20_000)
    for start in range(0, 20_000, 1000):
        observed = np.bincount(sources[start : start + 1000], minlength=2)
        expected = weights.expected(start + 1000) - weights.expected(start)
        assert ((observed - expected) ** 2 / expected).sum() < CHI2_999[1]


def test_random_batches_vary_and_differ_between_seeds_and_epochs() -> None:
    """Within a block the order is random: batches of 32 hold different mixes, and another seed or
    epoch arranges the same counts differently."""
    counts = Counts(segments([(0, [0.5, 0.5])]))
    one = Blocks(counts, 1024, seed=1).find(0, 0, 4096, 0).sources[:1024]
    per_batch = {int(np.bincount(batch, minlength=2)[0]) for batch in one.reshape(32, 32)}
    assert len(per_batch) > 3
    assert not np.array_equal(one, Blocks(counts, 1024, seed=2).find(0, 0, 4096, 0).sources[:1024])
    assert not np.array_equal(one, Blocks(counts, 1024, seed=1).find(1, 0, 4096, 0).sources[:1024])
    assert np.array_equal(one, Blocks(counts, 1024, seed=1).find(0, 0, 4096, 5).sources[:1024])


def test_stratified_blocks_hold_the_shares_in_every_global_batch() -> None:
    weights = np.asarray([0.45, 0.35, 0.2])
    blocks = Blocks(Counts(segments([(0, weights)])), 32, seed=0)
    sources = block_sources(blocks, 32 * 500)
    for batch in sources.reshape(500, 32):
        observed = np.bincount(batch, minlength=3)
        assert (np.abs(observed - 32 * weights) < 1).all()


@pytest.mark.parametrize(
    ("length", "block", "per_chunk"),
    [(1000, 100, None), (1050, 100, 3), (2500, 1000, None), (997, 64, 2)],
    ids=["one chunk", "chunks, the last block short", "the last block short", "many chunks"],
)
def test_draw_numbers_count_each_sources_earlier_draws_in_the_epoch(
    length: int, block: int, per_chunk: int | None
) -> None:
    blocks = Blocks(Counts(segments([(0, [0.6, 0.4])])), block, seed=0, per_chunk=per_chunk)
    seen: dict[int, list[int]] = {0: [], 1: []}
    for k in range(length):
        chunk = blocks.find(0, 0, length, k)
        assert len(chunk.sources) == len(chunk.draws) == min(blocks.chunk, length - chunk.start)
        seen[int(chunk.sources[k - chunk.start])].append(int(chunk.draws[k - chunk.start]))
    first = round(0.6 * length)
    assert seen == {0: list(range(first)), 1: list(range(length - first))}
