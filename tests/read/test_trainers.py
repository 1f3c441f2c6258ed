"""Trainer integration, each one line, with the real packages on CPU: PyTorch Lightning
(the loader's state in the Trainer checkpoint, ``ddp_spawn`` with 2 processes), Hugging
Face accelerate (``Accelerator.prepare`` with its stateful-dataloader option) and
torchdata's ``StatefulDataLoader``."""

from __future__ import annotations

import os
from typing import Any

import lightning
import pytest
import torch
from helpers.pipeline import write_shards

from shardkit import Dataset, Loader

BATCH = 3


def _key(sample: dict[str, Any]) -> str:
    return str(sample["__key__"])


def _dataset(folder: str, node: tuple[int, int] | None = None) -> Dataset:
    return (
        Dataset(folder, seed=7, shuffle_shards=True, node=node)
        .map(_key)
        .batched(BATCH, collate=None)
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("trainers"))
    write_shards(path, [7, 5, 9, 6, 8, 5])  # 40 samples
    return path


class _KeyModel(lightning.LightningModule):
    """Records the keys of every training batch, per rank, in ``out``."""

    def __init__(self, folder: str, out: str) -> None:
        super().__init__()
        self.folder, self.out = folder, out
        self.layer = torch.nn.Linear(1, 1)

    def train_dataloader(self) -> Any:
        return Loader(
            _dataset(self.folder), num_workers=2, all_ranks=True, multiprocessing_context="fork"
        )

    def training_step(self, batch: list[str], index: int) -> Any:
        with open(os.path.join(self.out, f"rank{self.global_rank}.txt"), "a") as f:
            f.write(" ".join(batch) + "\n")
        return self.layer(torch.ones(1, 1)).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(steps: int, **options: Any) -> lightning.Trainer:
    return lightning.Trainer(
        accelerator="cpu", devices=2, strategy="ddp_spawn", max_steps=steps, max_epochs=1,
        logger=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, **options,
    )  # fmt: skip


@pytest.mark.filterwarnings("ignore::UserWarning")  # Lightning's advice on CPU and workers
def test_lightning_ddp_spawn_resumes_from_the_trainer_checkpoint(
    folder: str, tmp_path: os.PathLike[str]
) -> None:
    """Stopped after 3 steps, a checkpoint, a new Trainer resumed from it: each rank's
    batches are its uninterrupted epoch's, batch for batch."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    out, ckpt = str(tmp_path), os.path.join(str(tmp_path), "stop.ckpt")
    every = ModelCheckpoint(dirpath=out, filename="stop", every_n_train_steps=3)
    _trainer(3, callbacks=[every]).fit(_KeyModel(folder, out))
    _trainer(100, enable_checkpointing=False).fit(_KeyModel(folder, out), ckpt_path=ckpt)
    for rank in range(2):
        with open(os.path.join(out, f"rank{rank}.txt")) as f:
            seen = [line.split() for line in f]
        expected = list(
            Loader(_dataset(folder, (rank, 2)), num_workers=2, multiprocessing_context="fork")
        )
        assert seen == expected, rank


def test_accelerate_prepares_and_checkpoints_the_loader(
    folder: str, tmp_path: os.PathLike[str]
) -> None:
    """``Accelerator.prepare`` hands a shardkit.Loader back as it is (it already splits
    by rank and saves its position); ``register_for_checkpointing`` puts its state in
    ``save_state``, and ``load_state`` continues batch for batch."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration

    def accelerator_and_loader() -> tuple[Any, Loader]:
        config = DataLoaderConfiguration(use_stateful_dataloader=True)
        accelerator = Accelerator(cpu=True, dataloader_config=config)
        loader = Loader(_dataset(folder), num_workers=2, multiprocessing_context="fork")
        prepared = accelerator.prepare(loader)
        assert prepared is loader
        accelerator.register_for_checkpointing(prepared)
        return accelerator, prepared

    full = list(Loader(_dataset(folder), num_workers=2, multiprocessing_context="fork"))
    accelerator, loader = accelerator_and_loader()
    head = []
    for batch in loader:
        head.append(batch)
        if len(head) == 4:
            break
    accelerator.save_state(str(tmp_path))
    accelerator, loader = accelerator_and_loader()
    accelerator.load_state(str(tmp_path))
    assert head + list(loader) == full
