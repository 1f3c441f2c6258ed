"""Two builds at once in one process (two threads of a notebook or a service) are as
independent as two builds in two processes: each packs every one of its own images, with
the bytes it has when it runs alone."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.build import make_corpus, snapshot

import shardkit
from shardkit import BuildOptions, BuildResult

COUNT = 120


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("corpora")
    return (
        make_corpus(str(root / "a"), count=COUNT, bad=False, seed=1),
        make_corpus(str(root / "b"), count=COUNT, bad=False, seed=2),
    )


def _at_once(*builds: Callable[[], BuildResult]) -> list[BuildResult]:
    """Run ``builds`` in threads started together; re-raises the first error."""
    start = threading.Barrier(len(builds))
    results: list[Any] = [None] * len(builds)

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = builds[i]()
        except BaseException as exc:  # reported by the test, not lost in the thread
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(builds))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


@pytest.mark.parametrize("workers", [1, 2])
def test_two_image_folder_builds_at_once_pack_every_image_with_the_lone_bytes(
    corpora: tuple[str, str], tmp_path: Path, workers: int
) -> None:
    options = BuildOptions(max_count=8, workers=workers, seed=3)
    alone = []
    for name, corpus in zip("ab", corpora, strict=True):
        shardkit.build(corpus, tmp_path / f"alone-{name}", options=options)
        alone.append(snapshot(str(tmp_path / f"alone-{name}")))

    def build(name: str, corpus: str) -> Callable[[], BuildResult]:
        return lambda: shardkit.build(corpus, tmp_path / f"together-{name}", options=options)

    results = _at_once(*(build(name, c) for name, c in zip("ab", corpora, strict=True)))
    for name, result, lone in zip("ab", results, alone, strict=True):
        assert (result.samples, result.skipped) == (COUNT, [])
        assert snapshot(str(tmp_path / f"together-{name}")) == lone


def test_two_builds_from_shards_at_once_read_their_own_shards(
    corpora: tuple[str, str], tmp_path: Path
) -> None:
    """Each build keeps its own input shards open (not one table for the process)."""
    inputs = []
    for name, corpus in zip("ab", corpora, strict=True):
        shardkit.build(corpus, tmp_path / f"in-{name}", options=BuildOptions(max_count=30))
        inputs.append(str(tmp_path / f"in-{name}" / "shard-{000000..000003}.tar"))
    options = BuildOptions(max_count=8, workers=1, seed=5)
    alone = []
    for name, spec in zip("ab", inputs, strict=True):
        shardkit.build(spec, tmp_path / f"alone-{name}", options=options)
        alone.append(snapshot(str(tmp_path / f"alone-{name}")))

    def build(name: str, spec: str) -> Callable[[], BuildResult]:
        return lambda: shardkit.build(spec, tmp_path / f"together-{name}", options=options)

    results = _at_once(*(build(name, s) for name, s in zip("ab", inputs, strict=True)))
    for name, result, lone in zip("ab", results, alone, strict=True):
        assert (result.samples, result.skipped) == (COUNT, [])
        assert snapshot(str(tmp_path / f"together-{name}")) == lone


def test_two_builds_from_python_iterables_at_once(tmp_path: Path) -> None:
    """A one-pass iterable always builds in the calling thread."""

    def samples(tag: str) -> Any:
        return ({"__key__": f"{tag}{i:04d}", "txt": f"{tag} {i}"} for i in range(COUNT))

    options = BuildOptions(max_count=8, workers=2)
    shardkit.build(samples("a"), tmp_path / "alone-a", options=options)
    shardkit.build(samples("b"), tmp_path / "alone-b", options=options)

    def build(tag: str) -> Callable[[], BuildResult]:
        return lambda: shardkit.build(samples(tag), tmp_path / f"together-{tag}", options=options)

    results = _at_once(build("a"), build("b"))
    for tag, result in zip("ab", results, strict=True):
        assert (result.samples, result.skipped) == (COUNT, [])
        assert snapshot(str(tmp_path / f"together-{tag}")) == snapshot(
            str(tmp_path / f"alone-{tag}")
        )
