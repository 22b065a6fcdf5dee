"""The slow links' windows (``viewer/diagnose/windows.py``) against the same samples kept and
compared from scratch: deques per key, the others' samples concatenated for each key."""

from __future__ import annotations

import collections
import random

import numpy as np
import pytest

from commviz.viewer.diagnose import slow
from commviz.viewer.diagnose.windows import Durations, Windows

LENGTH, LEAST = 16, 6


def _scratch_outliers(windows: dict[object, collections.deque]) -> dict:
    """The slow links' rule as it was computed before the windows: every key against the
    concatenation of all the others' samples."""
    full = {k: np.fromiter(window, np.float64) for k, window in windows.items()
            if len(window) >= slow.SLOW_SAMPLES}
    if len(full) < 3:
        return {}
    out = {}
    for key, mine in full.items():
        rest = np.concatenate([v for k, v in full.items() if k != key])
        med, others, others_p90 = (float(np.median(mine)), float(np.median(rest)),
                                   float(np.percentile(rest, 90)))
        if (float(np.percentile(mine, 25)) > max(slow.SLOW_FACTOR * others, others_p90)
                and med - others > slow.SLOW_MIN_NS):
            out[key] = (med, others)
    return out


def _play(rng: random.Random, windows: Windows, deques: dict, steps: int,
          sample, keys: int) -> None:
    """Random batches (a key's several samples in one, more than a window at times) and keys
    forgotten now and then, into both."""
    for _ in range(steps):
        if deques and rng.random() < 0.05:
            key = rng.choice(list(deques))
            windows.drop(key)
            del deques[key]
        batch = rng.choice([1, 3, 20, 2 * windows.length + 3])
        if rng.random() < 0.3:  # one key's
            names = [rng.randrange(keys)] * batch
            values = [sample(k) for k in names]
            windows.append(names[0], np.array(values, np.int64))
        else:
            names = [rng.randrange(keys) for _ in range(batch)]
            values = [sample(k) for k in names]
            distinct = list(dict.fromkeys(names))
            windows.extend(distinct, np.array([distinct.index(k) for k in names], np.int64),
                           np.array(values, np.int64))
        for k, v in zip(names, values):
            deques.setdefault(k, collections.deque(maxlen=windows.length)).append(v)


@pytest.mark.parametrize("seed", range(6))
def test_the_rest_of_the_pool_reads_as_numpy_over_the_others_samples(seed):
    """Small integer samples, so that many are equal: each order statistic of the others'
    samples, read from the pool, is numpy's over their concatenation to the last bit."""
    rng = random.Random(seed)
    windows, deques = Windows(LENGTH, LEAST), {}
    for _ in range(12):
        _play(rng, windows, deques, 15, lambda k: rng.randrange(40 + 7 * k), keys=9)
        assert list(windows) == list(deques)
        for k, d in deques.items():
            assert windows.window(k).tolist() == list(d)
        full = [k for k, d in deques.items() if len(d) >= LEAST]
        keys, held = windows.pooled()
        assert keys == full and held.tolist() == [len(deques[k]) for k in full]
        if len(full) < 2:
            continue
        for k in full:
            rest = np.concatenate([np.array(deques[o], np.float64) for o in full if o != k])
            assert windows.rest_median(k) == float(np.median(rest))
            for q in (0, 10, 25, 50, 90, 99, 100):
                assert windows.rest_percentile(k, q) == float(np.percentile(rest, q))
        for q in (50, 90):  # what each key's rest is at least: never above what it is
            floors = windows.rest_floor(held, q)
            assert all(f <= windows.rest_percentile(k, q) for k, f in zip(keys, floors))


@pytest.mark.parametrize("seed", range(8))
def test_outliers_are_those_found_from_scratch(seed):
    """Pairs of transfers of a few ms with a tail, a few of them slower by a random factor
    around the rule's (5x, 5 ms above): what the windows find is what the rule finds over
    the same samples kept in deques, key by key, with its medians."""
    rng = random.Random(seed)
    windows = Windows(slow.SLOW_WINDOW, slow.SLOW_SAMPLES)
    deques: dict = {}
    slower = dict.fromkeys(range(24), 1.0)
    # below the rule, about at it, far above: found only while the slow ones are few
    for k, factor in zip(rng.sample(range(24), 3), (3.0, 6.0, 20.0)):
        slower[k] = factor

    def took(k: int) -> int:
        ms = rng.lognormvariate(0.5, 0.6) * slower[k] * (3.0 if rng.random() < 0.1 else 1.0)
        return int(ms * 1e6)

    found = 0
    for _ in range(10):
        _play(rng, windows, deques, 40, took, keys=24)
        named = slow._outliers(windows)
        assert named == _scratch_outliers(deques)
        assert list(named) == [k for k in deques if k in named]  # in the keys' order
        found += len(named)
    assert found  # the case names some: the rule is exercised, not only its filter


def test_a_window_joins_the_pool_at_its_least_and_leaves_it_when_forgotten():
    windows = Windows(4, 3)
    windows.extend(["a", "b"], np.array([0, 0, 1, 1, 1]), np.array([1, 2, 7, 8, 9]))
    assert windows.pooled()[0] == ["b"]
    windows.extend(["a"], np.array([0]), np.array([3]))
    keys, held = windows.pooled()
    assert keys == ["a", "b"] and held.tolist() == [3, 3]
    assert windows.rest_median("a") == 8.0 and windows.rest_median("b") == 2.0
    windows.extend(["b"], np.array([0] * 6), np.arange(20, 26))  # more than a window at once
    assert windows.window("b").tolist() == [22, 23, 24, 25]
    assert windows.rest_percentile("a", 100) == 25.0
    windows.drop("b")
    windows.extend(["c"], np.array([0] * 3), np.array([4, 5, 6]))
    assert windows.pooled()[0] == ["a", "c"] and windows.rest_median("a") == 5.0


def test_durations_keep_a_windows_per_op_size_and_group_size_in_the_order_keys_came():
    groups = [(str(g), tuple(range(n))) for g, n in enumerate((8, 8, 128, 8))]
    durations = Durations(4, 2, groups)
    for key in [(2, "all_reduce", 10), (0, "all_reduce", 5), (1, "all_reduce", 5),
                (3, "all_reduce", 10)]:
        durations.extend(key, np.array([key[0], key[0] + 1]))
    assert list(durations) == [(2, "all_reduce", 10), (0, "all_reduce", 5),
                               (1, "all_reduce", 5), (3, "all_reduce", 10)]
    kinds = durations.kinds()
    assert [kind for kind, _ in kinds] == [("all_reduce", 10, 128), ("all_reduce", 5, 8),
                                           ("all_reduce", 10, 8)]
    assert [list(w) for _, w in kinds] == [[2], [0, 1], [3]]
    assert durations.window((1, "all_reduce", 5)).tolist() == [1, 2]
    del durations[(2, "all_reduce", 10)]  # the oldest, as watch.make_room forgets it
    assert len(durations) == 3 and [k for k, _ in durations.kinds()] == [
        ("all_reduce", 5, 8), ("all_reduce", 10, 8)]


@pytest.mark.parametrize("fast, named", [(8, True), (9, False)])
def test_a_key_at_the_edge_of_its_25th_percentile_is_found_as_from_scratch(fast, named):
    """32 samples: the 25th percentile lies between the 8th and 9th. With 8 at 1 ms and the
    rest at 50 ms it is above the others' 1 ms; with 9 at 1 ms it is 1 ms: the filter lets
    exactly those through that the rule names."""
    windows, deques = Windows(slow.SLOW_WINDOW, slow.SLOW_SAMPLES), {}
    for key in range(3):
        deques[key] = [1_000_000] * slow.SLOW_SAMPLES
    deques[3] = [1_000_000] * fast + [50_000_000] * (slow.SLOW_SAMPLES - fast)
    for key, values in deques.items():
        windows.extend([key], np.zeros(len(values), np.int64), np.array(values))
    assert slow._outliers(windows) == _scratch_outliers(deques)
    assert (3 in slow._outliers(windows)) == named
