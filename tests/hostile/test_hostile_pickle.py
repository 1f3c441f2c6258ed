"""Untrusted shards cannot run code: unpickling is opt-in everywhere, pipe: URLs can be off.

Each payload, once unpickled, makes a marker directory. Every test shows the payload
is real (it runs with ``allow_pickle=True``) and that it does not run by default.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers.hostile import write_tar

from shardkit.codecs import Decoder, decode_sample
from shardkit.errors import DecodeError, UnsafeDataError


class Payload:
    """Unpickling this calls ``os.mkdir(marker)``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.marker,))


def _pickle(marker: str) -> bytes:
    return pickle.dumps(Payload(marker), protocol=4)


def _npy(marker: str) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.array([Payload(marker)], dtype=object), allow_pickle=True)
    return buffer.getvalue()


def _npz(marker: str) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, ok=np.arange(3), evil=np.array([Payload(marker)], dtype=object))
    return buffer.getvalue()


def _torch(marker: str, *, zip_format: bool = True) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(
        {"w": torch.ones(2), "x": Payload(marker)},
        buffer,
        _use_new_zipfile_serialization=zip_format,
    )
    return buffer.getvalue()


PAYLOADS: dict[str, tuple[str, Callable[[str], bytes], type[Exception]]] = {
    "pyd": ("pyd", _pickle, UnsafeDataError),
    "pickle": ("pickle", _pickle, UnsafeDataError),
    "pkl": ("pkl", _pickle, UnsafeDataError),
    "upper-case PKL": ("x.PKL", _pickle, UnsafeDataError),
    "gzipped pyd": ("pyd.gz", lambda m: gzip.compress(_pickle(m), mtime=0), UnsafeDataError),
    "npy object array": ("npy", _npy, DecodeError),
    "npz object member": ("npz", _npz, DecodeError),
    "pth (zip)": ("pth", _torch, DecodeError),
    "pth (legacy format)": ("pth", lambda m: _torch(m, zip_format=False), DecodeError),
}


@pytest.mark.parametrize("case", sorted(PAYLOADS))
def test_a_malicious_pickle_does_not_run_without_opt_in(
    case: str, tmp_path: os.PathLike[str]
) -> None:
    ext, make, error = PAYLOADS[case]
    marker = os.path.join(str(tmp_path), "pwned")
    sample = {"__key__": "k", "__url__": "s.tar", ext: make(marker)}
    for decode in (Decoder(), Decoder("rgb8"), lambda s: decode_sample(s, only=[ext])):
        with pytest.raises(error) as info:
            decode(sample)
        assert (info.value.key, info.value.url) == ("k", "s.tar")  # type: ignore[attr-defined]
        assert not os.path.exists(marker)
    Decoder(allow_pickle=True)(sample)
    assert os.path.isdir(marker)  # the payload is real


def test_the_reader_never_decodes(tmp_path: os.PathLike[str]) -> None:
    from shardkit.reader import read_shard

    marker = os.path.join(str(tmp_path), "pwned")
    path = os.path.join(str(tmp_path), "s.tar")
    with open(path, "wb") as f:
        f.write(write_tar([{"__key__": "k", "pyd": _pickle(marker), "npy": _npy(marker)}]))
    (sample,) = read_shard(path)
    assert isinstance(sample["pyd"], bytes) and isinstance(sample["npy"], bytes)
    assert not os.path.exists(marker)


# --------------------------------------------------------------------------- pipe: URLs


def _read_pipe(tmp_path: os.PathLike[str], setting: str | None) -> tuple[int, str, bool]:
    shard = os.path.join(str(tmp_path), "s.tar")
    marker = os.path.join(str(tmp_path), "ran")
    with open(shard, "wb") as f:
        f.write(write_tar([{"__key__": "k", "txt": b"hi"}]))
    code = (
        "import sys\n"
        "from shardkit.reader import read_shard\n"
        "from shardkit.errors import StorageError\n"
        "try:\n"
        f"    print(len(list(read_shard({f'pipe:mkdir {marker} && cat {shard}'!r}))))\n"
        "except StorageError as exc:\n"
        "    print('refused', exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SHARDKIT_ALLOW_PIPE"}
    if setting is not None:
        env["SHARDKIT_ALLOW_PIPE"] = setting
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    return done.returncode, done.stdout.strip(), os.path.isdir(marker)


@pytest.mark.parametrize("setting", ["0", "false", "no", "NO", "off", "OFF"])
def test_pipe_urls_can_be_switched_off(tmp_path: os.PathLike[str], setting: str) -> None:
    returncode, out, ran = _read_pipe(tmp_path, setting)
    assert returncode == 0
    assert out.startswith("refused") and "SHARDKIT_ALLOW_PIPE" in out
    assert not ran  # the command never started


@pytest.mark.parametrize("setting", [None, "1", ""])
def test_pipe_urls_run_when_allowed(tmp_path: os.PathLike[str], setting: str | None) -> None:
    assert _read_pipe(tmp_path, setting) == (0, "1", True)
