"""Local channels (streamguard.privacy.channel) and region classification (streamguard.redaction.regions)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamguard.privacy.channel import ChannelError, ChannelSequence, check_redaction, redaction_table
from streamguard.influence import binary_closed_form
from streamguard.redaction.regions import L, M, S, classify, side_redaction

# ---------------------------------------------------------------------------------------------
# Channels
# ---------------------------------------------------------------------------------------------


def test_redaction_table_layout():
    e = redaction_table([0.25, 1.0])
    np.testing.assert_array_equal(e, [[0.75, 0.0, 0.25], [0.0, 0.0, 1.0]])


def test_from_redaction_deduplicates_and_round_trips():
    red = np.array([[0, 0], [1, 1], [0.3, 1], [0, 0], [0.3, 1], [1, 1]], dtype=float)
    seq = ChannelSequence.from_redaction(red)
    assert seq.n == 6 and seq.k == 2 and seq.m == 3
    assert seq.tables.shape[0] == 3  # release, (0.3, 1), (1, 1)
    assert seq.index[0] == 0 and seq.index[3] == 0  # table 0 is "always release"
    np.testing.assert_array_equal(seq.dense()[:, :, -1], red)
    for t in range(6):
        np.testing.assert_array_equal(seq.table(t), redaction_table(red[t]))


def test_from_dense_deduplicates():
    E = np.array([[[0.5, 0.5], [0.1, 0.9]], [[1.0, 0.0], [0.0, 1.0]], [[0.5, 0.5], [0.1, 0.9]]])
    seq = ChannelSequence.from_dense(E)
    assert seq.tables.shape[0] == 2
    np.testing.assert_array_equal(seq.dense(), E)


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        (np.array([[[0.5, 0.6], [0.5, 0.5]]]), r"table 0, input state 0: row sums to 1\.1"),
        (np.array([[[1.5, -0.5], [0.5, 0.5]]]), "negative"),
        (np.array([[[math.nan, 1.0], [0.5, 0.5]]]), "NaN"),
        (np.ones((2, 2)), "expected shape"),
    ],
)
def test_malformed_emission_tables_are_rejected(tables, message):
    with pytest.raises(ChannelError, match=message):
        ChannelSequence(tables, np.zeros(1, dtype=np.int64))


def test_channel_index_must_refer_to_existing_tables():
    tables = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    with pytest.raises(ChannelError, match="does not exist"):
        ChannelSequence(tables, np.array([0, 1]))
    with pytest.raises(ChannelError, match="one-dimensional"):
        ChannelSequence(tables, np.zeros((1, 1), dtype=np.int64))


@pytest.mark.parametrize("red", [[[0.5, 1.2]], [[-0.1, 0.0]], [[math.nan, 0.0]], [0.5, 0.5], [[0.1, 0.2, 0.3]]])
def test_malformed_redaction_tables_are_rejected(red):
    with pytest.raises(ChannelError):
        check_redaction(red)


# ---------------------------------------------------------------------------------------------
# Regions (ties follow the paper: L if ε' < ǐ, M if ǐ ≤ ε' < î, S if î ≤ ε')
# ---------------------------------------------------------------------------------------------


def test_region_ties_follow_the_definition():
    infl = binary_closed_form(0.25, 0.5, [1, 2, 3])  # ǐ(1) = log 1.5, î(1) = log 2, ...
    lo1, hi1 = infl[0]
    regions, common = classify(infl, lo1)  # ε' = ǐ(1) exactly → distance 1 in M
    assert regions[0] == M
    regions, _ = classify(infl, math.nextafter(lo1, 0.0))
    assert regions[0] == L
    regions, _ = classify(infl, hi1)  # ε' = î(1) exactly → S, and everything beyond too
    np.testing.assert_array_equal(regions, [S, S, S])
    regions, _ = classify(infl, math.nextafter(hi1, 0.0))
    assert regions[0] == M
    np.testing.assert_array_equal(common, [0, 0, 0])


def test_zero_threshold_makes_the_whole_side_L():
    infl = binary_closed_form(0.25, 0.5, np.arange(1, 6))
    regions, _ = classify(infl, 0.0)
    assert np.all(regions == L)


def test_once_s_always_s():
    # a non-monotone influence profile (as on a non-stationary left side): after the first S,
    # everything is S because the released record screens off the rest
    infl = np.array([[0.1, 0.2], [0.01, 0.02], [0.5, 0.9], [0.3, 0.4]])
    regions, common = classify(infl, 0.05)
    np.testing.assert_array_equal(regions, [L, S, S, S])
    np.testing.assert_array_equal(common, [0, 0, 0, 0])


def test_common_value_is_the_smaller_influence():
    infl = binary_closed_form(0.8, 0.01, [1, 2, 3])  # α > β: 1 is common
    regions, common = classify(infl, 1.0)
    np.testing.assert_array_equal(common, [1, 1, 1])
    assert regions[0] == M
    red = side_redaction(regions, common, np.full(3, 0.4))
    for d in range(3):
        if regions[d] == M:
            assert red[d].tolist() == [1.0, 0.4]
        elif regions[d] == S:
            assert red[d].tolist() == [0.0, 0.0]
        else:
            assert red[d].tolist() == [1.0, 1.0]
