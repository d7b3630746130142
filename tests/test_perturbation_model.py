"""Joint and PerturbationChannel input checks (streamguard.perturbation.model)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamguard.perturbation.model import Joint, ModelInputError


@pytest.mark.parametrize("prior, match", [
    ([0.5, 0.6], r"^prior: entries sum to 1\.1, not 1$"),
    ([0.5, -0.1, 0.6], "^prior: has negative entries$"),
    ([math.nan, 0.5, 0.5], "^prior: contains NaN or infinity$"),
    ([math.inf, 0.5], "^prior: contains NaN or infinity$"),
    ([0.5, 0.0, 0.5], r"^prior: P\(x=1\) is 0"),
    ([1.0], "^prior: expected a vector of at least 2"),
    ([[0.5, 0.5]], "^prior: expected a vector of at least 2"),
    (["a", 0.5], "^prior: not a numeric vector$"),
])
def test_bad_prior_named_as_the_prior(prior, match):
    """The prior is checked as given, not as the diagonal joint built from it."""
    with pytest.raises(ModelInputError, match=match):
        Joint.from_prior(prior)


def test_prior_builds_the_diagonal_joint():
    joint = Joint.from_prior([0.4, 0.3, 0.2, 0.1])
    assert np.array_equal(joint.p, np.diag([0.4, 0.3, 0.2, 0.1])) and joint.is_prior_only
    assert joint.p_x.tolist() == [0.4, 0.3, 0.2, 0.1]


@pytest.mark.parametrize("p, match", [
    ([[0.5, 0.1], [0.3, 0.3]], r"^joint: entries sum to 1\.2, not 1$"),
    ([[0.5, -0.1], [0.3, 0.3]], "^joint: has negative entries$"),
    ([[0.5, 0.0], [0.5, 0.0]], r"^joint: zero marginal P_X\(x=1\)$"),
])
def test_bad_joint_named_as_the_joint(p, match):
    with pytest.raises(ModelInputError, match=match):
        Joint(np.array(p))
