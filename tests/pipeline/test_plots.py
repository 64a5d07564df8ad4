"""Thinning a plot's series: only the drawing is thinned, never the figures."""

from __future__ import annotations

from tidelog.pipeline.plots import MAX_POINTS, thin


def test_a_short_series_is_drawn_whole_and_a_long_one_thinned_to_every_kth_point():
    xs = [float(n) for n in range(MAX_POINTS)]
    assert thin(xs, xs) == (xs, xs)

    long = [float(n) for n in range(5 * MAX_POINTS + 3)]
    thin_xs, thin_ys = thin(long, [2 * x for x in long])

    assert len(thin_xs) <= MAX_POINTS + 1
    assert thin_xs[0] == 0 and thin_xs[-1] == long[-1]  # the ends are kept
    assert thin_xs[1] - thin_xs[0] == 6  # every 6th point of 10,003
    assert thin_ys == [2 * x for x in thin_xs]
