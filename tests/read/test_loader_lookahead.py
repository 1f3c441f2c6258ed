"""A loader's position when its consumer takes batches ahead (issue 28, case 13).

Lightning resumed with ``Loader(ds, batch_size=N)`` lost one batch per rank: the loader
had no length, so Lightning fetched one batch ahead to find the epoch's end, and the saved
position counted that unseen batch. The loader now has a length wherever the count is
known (no look-ahead then), and a loop that must look ahead says so with
``state_dict(prefetched=k)``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.pipeline import write_shards

from shardkit import ConfigError, Dataset, Loader

COUNTS = [10, 14, 9, 11, 12, 8]  # 64 samples


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("lookahead") / "shards")
    write_shards(path, COUNTS)
    return path


def _key(sample: dict[str, Any]) -> str:
    return str(sample["__key__"])


def _loader(folder: str, batch: int, workers: int, **options: Any) -> Loader:
    ds = Dataset(folder, seed=3, shuffle_shards=True).map(_key)
    if workers:
        options["multiprocessing_context"] = "fork"
    return Loader(ds, batch_size=batch, num_workers=workers, collate_fn=list, **options)


@pytest.mark.parametrize(("workers", "batch"), [(0, 5), (2, 1), (2, 4), (2, 5), (2, 64), (2, 100)])
def test_a_batching_loader_knows_its_length_exactly(folder: str, batch: int, workers: int) -> None:
    loader = _loader(folder, batch, workers)
    assert len(loader) == sum(1 for _ in loader)
    dropping = _loader(folder, batch, workers, drop_last=True)
    assert len(dropping) == sum(1 for _ in dropping)


def test_a_loader_whose_count_is_unknown_says_so(folder: str) -> None:
    unknown = Loader(Dataset(folder).select(lambda s: True), batch_size=4)
    with pytest.raises(TypeError, match="len"):
        len(unknown)
    batched = Loader(Dataset(folder).batched(4, collate=None), batch_size=2)
    with pytest.raises(TypeError, match="change the number of items"):
        len(batched)


def _ahead(loader: Loader) -> Iterator[tuple[Any, bool]]:
    """Lightning's fetcher: one batch ahead when the loader has no length, so that the
    last batch is known to be the last; none when it has one."""
    try:
        size: int | None = len(loader)
    except TypeError:
        size = None
    batches = iter(loader)
    if size is not None:
        for n, batch in enumerate(batches, 1):
            yield batch, n == size
        return
    following = next(batches, None)
    while following is not None:
        batch, following = following, next(batches, None)
        yield batch, following is None


@pytest.mark.parametrize("workers", [0, 2])
def test_a_trainer_that_looks_ahead_without_a_length_resumes_without_a_gap(
    folder: str, workers: int
) -> None:
    full = [k for batch in _loader(folder, 5, workers) for k in batch]
    assert len(full) == 64
    for stop in (1, 4, 9):
        loader = _loader(folder, 5, workers)
        seen: list[str] = []
        for n, (batch, _) in enumerate(_ahead(loader), 1):
            seen += batch
            if n == stop:
                break
        again = _loader(folder, 5, workers)
        again.load_state_dict(loader.state_dict())
        assert seen + [k for batch in again for k in batch] == full, stop


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loop_that_fetches_one_ahead_saves_what_it_used(folder: str, workers: int) -> None:
    full = [k for batch in _loader(folder, 4, workers) for k in batch]
    for stop in (1, 3, 10):
        loader = _loader(folder, 4, workers)
        batches = iter(loader)
        following = next(batches)
        seen: list[str] = []
        for _ in range(stop):  # train on one batch while the next is fetched already
            batch, following = following, next(batches)
            seen += batch
        state = loader.state_dict(prefetched=1)
        again = _loader(folder, 4, workers)
        again.load_state_dict(state)
        assert seen + [k for batch in again for k in batch] == full, stop
        assert loader.state_dict(prefetched=0) != state


def test_prefetched_is_bounded_by_the_batches_handed_out(folder: str) -> None:
    loader = _loader(folder, 4, 0)
    batches = iter(loader)
    next(batches)
    next(batches)
    again = _loader(folder, 4, 0)
    again.load_state_dict(loader.state_dict(prefetched=2))  # both left out: the whole epoch
    assert [k for batch in again for k in batch] == [k for b in _loader(folder, 4, 0) for k in b]
    with pytest.raises(ConfigError, match="prefetched=3"):
        loader.state_dict(prefetched=3)
    with pytest.raises(ConfigError, match="prefetched must be an int"):
        loader.state_dict(prefetched=True)


lightning = pytest.importorskip("lightning")
torch = pytest.importorskip("torch")


class _KeyModel(lightning.LightningModule):  # type: ignore[misc]
    """Records the keys of every training batch in ``out``."""

    def __init__(self, folder: str, out: str) -> None:
        super().__init__()
        self.folder, self.out = folder, out
        self.layer = torch.nn.Linear(1, 1)

    def train_dataloader(self) -> Any:
        return _loader(self.folder, 5, 2)

    def training_step(self, batch: list[str], index: int) -> Any:
        with open(os.path.join(self.out, "keys.txt"), "a") as f:
            f.write(" ".join(batch) + "\n")
        return self.layer(torch.ones(1, 1)).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(steps: int, **options: Any) -> Any:
    return lightning.Trainer(
        accelerator="cpu", devices=1, max_steps=steps, max_epochs=1, logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        enable_checkpointing=bool(options.get("callbacks")), **options,
    )  # fmt: skip


@pytest.mark.filterwarnings("ignore::UserWarning")  # Lightning's advice on CPU and workers
@pytest.mark.filterwarnings("ignore::FutureWarning")  # Lightning's own use of torch
def test_lightning_resumed_with_a_batching_loader_reads_every_sample_once(
    folder: str, tmp_path: os.PathLike[str]
) -> None:
    from lightning.pytorch.callbacks import ModelCheckpoint

    out = str(tmp_path)
    every = ModelCheckpoint(dirpath=out, filename="stop", every_n_train_steps=4)
    _trainer(4, callbacks=[every]).fit(_KeyModel(folder, out))
    _trainer(-1).fit(_KeyModel(folder, out), ckpt_path=os.path.join(out, "stop.ckpt"))
    with open(os.path.join(out, "keys.txt")) as f:
        keys = f.read().split()
    full = [k for batch in _loader(folder, 5, 2) for k in batch]
    assert keys == full  # 64 samples: none lost at the checkpoint, none read twice
