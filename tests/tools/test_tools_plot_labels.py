"""``stats --plot`` names every axis with its unit (a new user could not read the plot)."""

from __future__ import annotations

from pathlib import Path

from helpers.tools import samples, write_shards

from shardkit.tools.stats import stats, stats_figure


def test_every_axis_of_the_stats_plot_has_a_label_with_its_unit(tmp_path: Path) -> None:
    write_shards(str(tmp_path / "d"), samples(30, images=True), per_shard=10)
    result = stats(str(tmp_path / "d"), image_sizes=True)
    figure = stats_figure(result, top=2)
    labels = [(a.get_title(), a.get_xlabel(), a.get_ylabel()) for a in figure.axes]
    assert labels == [
        (
            "sample size (30 samples)",
            "bytes in the shard per sample, headers included (kB)",
            "samples (count)",
        ),
        ("image size (30 images)", "width and height (pixels)", "images (count)"),
        ("samples per class (top 2 of 3)", "class", "samples (count)"),
    ]
