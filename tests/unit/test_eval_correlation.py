"""The correlation engine against scipy, at every level, and on cases worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from spanjudge.eval.correlation.bootstrap import bootstrap_interval, input_weights, paired_bootstrap
from spanjudge.eval.correlation.coefficients import Groups, correlate, level_values

SCIPY = {
    "pearson": lambda x, y: stats.pearsonr(x, y)[0],
    "spearman": lambda x, y: stats.spearmanr(x, y)[0],
    "kendall": lambda x, y: stats.kendalltau(x, y)[0],
}


def _grid(seed: int, n_systems: int = 6, n_inputs: int = 25, drop: float = 0.15):
    """Judge scores with many ties (1-5), human scores on a coarse grid, some items missing."""
    rng = np.random.default_rng(seed)
    inputs = np.repeat(np.arange(n_inputs), n_systems)
    systems = np.tile(np.arange(n_systems), n_inputs)
    keep = rng.random(inputs.size) > drop
    human = np.round(rng.normal(size=inputs.size), 1)
    judge = np.clip(np.round(human + rng.normal(scale=1.0, size=inputs.size)) + 3, 1, 5)
    return judge[keep], human[keep], inputs[keep], systems[keep]


def _scipy_level(judge, human, inputs, systems, level, fn):
    if level == "global":
        return fn(judge, human)
    keys = inputs if level == "input" else systems
    values = []
    for key in np.unique(keys):
        x, y = judge[keys == key], human[keys == key]
        if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
            continue
        values.append(fn(x, y))
    return float(np.mean(values))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("level", ["global", "input", "item"])
@pytest.mark.parametrize("coefficient", ["pearson", "spearman", "kendall"])
def test_agrees_with_scipy_at_every_level(seed: int, level: str, coefficient: str) -> None:
    judge, human, inputs, systems = _grid(seed)
    ours = correlate(judge, human, inputs, systems, coefficient, level).value  # type: ignore[arg-type]
    assert ours == pytest.approx(_scipy_level(judge, human, inputs, systems, level, SCIPY[coefficient]), abs=1e-12)


def test_kendall_tau_c_agrees_with_scipy() -> None:
    judge, human, inputs, systems = _grid(5)
    ours = correlate(judge, human, inputs, systems, "kendall", "global", kendall_variant="c").value
    assert ours == pytest.approx(stats.kendalltau(judge, human, variant="c")[0], abs=1e-12)
    assert ours != pytest.approx(correlate(judge, human, inputs, systems, "kendall", "global").value, abs=1e-6)


def test_hand_computed_three_items() -> None:
    # x = 1,2,3 and y = 1,3,2: r = 0.5, rho = 0.5; pairs (1,2)+ (1,3)+ (2,3)- -> tau = (2-1)/3
    args = ([1, 2, 3], [1, 3, 2], ["a", "a", "a"], ["s1", "s2", "s3"])
    assert correlate(*args, "pearson").value == pytest.approx(0.5)
    assert correlate(*args, "spearman").value == pytest.approx(0.5)
    assert correlate(*args, "kendall").value == pytest.approx(1 / 3)


def test_hand_computed_levels_and_skipped_groups() -> None:
    # input a: judge 1,2,3 vs human 1,2,3 -> 1; input b: judge 3,2,1 vs human 1,2,3 -> -1;
    # input c: constant judge -> skipped (not a zero). Input level = mean(1, -1) = 0.
    judge = [1, 2, 3, 3, 2, 1, 4, 4, 4]
    human = [1, 2, 3, 1, 2, 3, 1, 2, 3]
    inputs = ["a"] * 3 + ["b"] * 3 + ["c"] * 3
    systems = ["s1", "s2", "s3"] * 3
    result = correlate(judge, human, inputs, systems, "pearson", "input")
    assert result.value == pytest.approx(0.0)
    assert (result.groups, result.skipped) == (3, 1)
    # item level: each system has judge (1,3,4)/(2,2,4)/(3,1,4) vs human (1,1,1)/(2,2,2)/(3,3,3): all constant
    item = correlate(judge, human, inputs, systems, "spearman", "item")
    assert np.isnan(item.value) and item.skipped == 3


def test_constant_everything_is_nan_not_zero() -> None:
    result = correlate([2, 2, 2, 2], [1, 2, 3, 4], ["a", "b", "c", "d"], ["s"] * 4, "kendall")
    assert np.isnan(result.value) and result.skipped == 1


@pytest.mark.parametrize("level", ["global", "input", "item"])
@pytest.mark.parametrize("coefficient", ["pearson", "spearman", "kendall"])
def test_bootstrap_resample_equals_scipy_on_duplicated_inputs(level: str, coefficient: str) -> None:
    judge, human, inputs, systems = _grid(3, n_systems=4, n_inputs=15)
    groups = Groups.from_labels(inputs, systems)
    weights = input_weights(groups.n_inputs, 4, seed=7)
    ours = level_values(judge, human, groups, level, coefficient, weights).values  # type: ignore[arg-type]
    for row, value in zip(weights, ours, strict=True):
        drawn = [j for j in range(groups.n_inputs) for _ in range(int(row[j]))]
        if level == "input":  # each drawn input adds its own coefficient to the mean
            values = []
            for j in drawn:
                x, y = judge[groups.inputs == j], human[groups.inputs == j]
                if len(x) >= 2 and not np.all(x == x[0]) and not np.all(y == y[0]):
                    values.append(SCIPY[coefficient](x, y))
            expected = float(np.mean(values))
        else:  # the resampled data set, duplicated inputs and all
            index = np.concatenate([np.flatnonzero(groups.inputs == j) for j in drawn])
            expected = _scipy_level(
                judge[index], human[index], groups.inputs[index], systems[index], level, SCIPY[coefficient]
            )
        assert value == pytest.approx(expected, abs=1e-10)


def test_bootstrap_interval_is_seeded_and_brackets_the_estimate() -> None:
    judge, human, inputs, systems = _grid(4, n_inputs=40)
    groups = Groups.from_labels(inputs, systems)
    first = bootstrap_interval(judge, human, groups, "global", "spearman", n_resamples=300, seed=1)
    again = bootstrap_interval(judge, human, groups, "global", "spearman", n_resamples=300, seed=1)
    other = bootstrap_interval(judge, human, groups, "global", "spearman", n_resamples=300, seed=2)
    assert first == again and first != other
    assert first.low < first.value < first.high and first.undefined == 0
    assert 0.05 < first.high - first.low < 0.6


def test_paired_bootstrap_tells_a_better_judge_from_noise() -> None:
    rng = np.random.default_rng(0)
    inputs = np.repeat(np.arange(50), 4)
    systems = np.tile(np.arange(4), 50)
    human = rng.normal(size=200)
    good = human + rng.normal(scale=0.5, size=200)
    noise = rng.normal(size=200)
    groups = Groups.from_labels(inputs, systems)
    test = paired_bootstrap(good, noise, human, groups, "global", "pearson", n_resamples=500, seed=0)
    assert test.a > 0.8 and abs(test.b) < 0.2
    assert test.difference.low > 0 and test.p_value < 0.01
    reverse = paired_bootstrap(noise, good, human, groups, "global", "pearson", n_resamples=500, seed=0)
    assert reverse.p_value > 0.99
