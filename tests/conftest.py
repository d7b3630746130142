"""Shared configuration for the streamguard test suite.

- Hypothesis: ``deadline=None`` because the first call of every numba kernel compiles it (or loads
  it from the on-disk cache), which can take seconds and would otherwise trip the deadline.
  ``max_examples`` is kept moderate so the whole suite runs in a few minutes on two cores; set
  ``HYPOTHESIS_PROFILE=thorough`` for a longer run.
- Fixtures for the two reference chains of notes/000: α=.25, β=.5 (Example 1, Fig. 2, Table I)
  and α=.01, β=.8 (Fig. 3/4); the broker fixtures of tests/brokers.py.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from streamguard import MarkovChain

# The broker fixtures (a real Mosquitto on a free loopback port) for every test module; importing
# them here instead of in each module keeps the modules free of names their parameters shadow.
from brokers import device_and_central, mosquitto, mosquitto_auth, mosquitto_mtls, mosquitto_persistent, mosquitto_tls  # noqa: F401

settings.register_profile(
    "streamguard",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "thorough",
    parent=settings.get_profile("streamguard"),
    max_examples=500,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "streamguard"))


@pytest.fixture(scope="session")
def fig3_chain() -> MarkovChain:
    """α = .01, β = .8: the chain of Fig. 3/4 and of the Theorem 2 counterexample."""
    return MarkovChain.binary(0.01, 0.8)


@pytest.fixture(scope="session")
def ex1_chain() -> MarkovChain:
    """α = .25, β = .5: the chain of Example 1, Fig. 2 and Table I."""
    return MarkovChain.binary(0.25, 0.5)
