"""GaugeSampler: readings of a running loader over time, for the report's figure."""

from __future__ import annotations

import threading

import pytest

from loaderfactory.gauges import GaugeSampler, Readings


def test_readings_start_and_end_with_the_block() -> None:
    """A reading is taken as the block begins and as it ends; ``None`` readings are skipped."""
    calls: list[int] = []

    def counter() -> dict[str, float]:
        calls.append(1)
        return {"n": len(calls)}

    with GaugeSampler({"count": counter, "idle": lambda: None}, interval=60) as sampler:
        pass
    readings = sampler.readings
    assert readings["count"].values == {"n": [1.0, 2.0]} and len(readings["count"].times) == 2
    assert readings["count"].times == sorted(readings["count"].times)
    assert readings["idle"].times == [] and readings["idle"].values == {}


def test_the_thread_samples_while_the_block_runs() -> None:
    """Between the first and the last reading the thread keeps reading."""
    third = threading.Event()
    calls: list[int] = []

    def gauge() -> dict[str, float]:
        calls.append(1)
        if len(calls) >= 3:
            third.set()
        return {"n": len(calls)}

    with GaugeSampler({"g": gauge}, interval=0.001) as sampler:
        assert third.wait(30)
    assert len(sampler.readings["g"].times) >= 4


def test_a_gauge_error_is_raised_when_the_block_ends() -> None:
    """A gauge that fails in the thread stops it; the error reaches the code that closes the sampler."""
    failed = threading.Event()
    calls: list[int] = []

    def gauge() -> dict[str, float]:
        calls.append(1)
        if len(calls) > 1:
            failed.set()
            raise OSError("counters gone")
        return {"n": 1}

    with pytest.raises(OSError, match="counters gone"), GaugeSampler({"g": gauge}, interval=0.001):
        assert failed.wait(30)


def test_the_blocks_own_error_is_raised_not_a_gauges() -> None:
    """When the block fails (a read error), that error leaves the sampler, not a gauge's."""
    failed = threading.Event()

    def gauge() -> dict[str, float]:
        if failed.is_set():
            raise OSError("counters gone")
        return {"n": 1}

    with pytest.raises(KeyError, match="the read failed"), GaugeSampler({"g": gauge}, interval=0.001):
        failed.set()
        raise KeyError("the read failed")


def test_thinning_keeps_the_first_and_the_last_reading() -> None:
    """Dropping every second reading keeps the run's whole span."""
    readings = Readings()
    for i in range(6):
        readings.add(float(i), {"v": i * 10})
    readings.thin()
    assert readings.times == [0.0, 2.0, 4.0, 5.0] and readings.values == {"v": [0.0, 20.0, 40.0, 50.0]}


def test_a_reading_with_other_names_is_refused() -> None:
    """A gauge returns the same names every time; another set is an error naming both."""
    readings = Readings()
    readings.add(0.0, {"a": 1})
    with pytest.raises(ValueError, match=r"changed names: \['a'\] then \['b'\]"):
        readings.add(1.0, {"b": 1})


def test_close_twice_is_safe() -> None:
    """Closing an already closed sampler does nothing."""
    sampler = GaugeSampler({"g": lambda: {"v": 1.0}}, interval=60)
    with sampler:
        pass
    sampler.close()
    assert len(sampler.readings["g"].times) == 2


def test_a_non_positive_interval_is_refused() -> None:
    """The interval must be positive."""
    with pytest.raises(ValueError, match="interval must be > 0, got 0"):
        GaugeSampler({}, interval=0)
