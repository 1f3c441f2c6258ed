"""Building from shards whose input changes after the driver listed it: the build fails
with one line naming the shard, never packs the listed samples' places in a changed file
(the versions the listing saw travel with the source to every worker)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.remote import gcs_options, http_service, s3_options

import shardkit
from shardkit import BuildOptions
from shardkit.builder import _shards as shards
from shardkit.errors import BuildError


def _inputs(folder: Path, *, text: str = "x", size: int = 400) -> list[str]:
    """Three tar shards of 6 samples with unique keys; ``text`` * ``size`` fills their
    ``txt``."""
    folder.mkdir(exist_ok=True)
    with shardkit.ShardWriter(str(folder / "in-%06d.tar"), max_count=6, index=False) as sink:
        for n in range(18):
            sink.write({"__key__": f"s{n:03d}", "txt": f"{n:03d}-" + text * size})
    return [str(folder / f"in-{n:06d}.tar") for n in range(3)]


def _after_listing(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """Run ``change`` once the driver has listed the input shards."""
    original = shards.list_shards

    def listed(*args: Any, **kwargs: Any) -> Any:
        listing = original(*args, **kwargs)
        change()
        return listing

    monkeypatch.setattr(shards, "list_shards", listed)


def _replace(url: str) -> None:
    """The same keys and sizes, other bytes: only the version says it changed."""
    folder = Path(url).parent / "new"
    _inputs(folder, text="y")
    os.replace(folder / Path(url).name, url)


def _truncate(url: str) -> None:
    with open(url, "r+b") as f:
        f.truncate(os.path.getsize(url) // 2)


def _append(url: str) -> None:
    with open(url, "ab") as f:
        f.write(b"\0" * 1024)


CHANGES = {"replaced": _replace, "truncated": _truncate, "appended": _append}


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("indexed", [False, True])
def test_a_local_shard_changed_after_listing_fails_the_build_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str, indexed: bool
) -> None:
    urls = _inputs(tmp_path / "in")
    if indexed:
        shardkit.tools.write_indexes(urls)
    _after_listing(monkeypatch, lambda: CHANGES[change](urls[1]))
    out = tmp_path / "out"
    with pytest.raises(BuildError, match="changed after it was listed") as caught:
        shardkit.build(str(tmp_path / "in"), str(out), options=BuildOptions(workers=1))
    assert caught.value.url == urls[1]
    assert not (out / "manifest.json").exists()


def test_a_shard_written_over_in_place_while_it_is_read_fails_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opened as listed, then the same bytes' places hold others (same size): the sample
    read from it next is not packed."""
    urls = _inputs(tmp_path / "in")
    _replace_later = _inputs(tmp_path / "other", text="y")[1]
    original = shards.ShardSource._read
    done: list[str] = []

    def read(self: shards.ShardSource, stream: Any, item: Any, url: str, *rest: Any) -> Any:
        sample = original(self, stream, item, url, *rest)
        if url == urls[1] and not done:  # opened and one sample read: now write over it
            done.append(url)
            with open(url, "r+b") as f, open(_replace_later, "rb") as new:
                f.write(new.read())
            info = os.stat(url)
            os.utime(url, ns=(info.st_atime_ns, info.st_mtime_ns + 1))
        return sample

    monkeypatch.setattr(shards.ShardSource, "_read", read)
    options = BuildOptions(workers=1, shuffle=False)
    with pytest.raises(BuildError, match="changed after it was listed") as caught:
        shardkit.build(str(tmp_path / "in"), str(tmp_path / "out"), options=options)
    assert caught.value.url == urls[1] and done == [urls[1]]


def test_a_resumed_build_whose_input_changed_meanwhile_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal's header holds every input shard's listed version: a rerun that lists
    another one never resumes onto the first run's parts."""
    urls = _inputs(tmp_path / "in")
    out = str(tmp_path / "out")
    options = BuildOptions(workers=1, shuffle=False, max_count=4)
    with monkeypatch.context() as patch:  # the first run stops at the last shard's change
        _after_listing(patch, lambda: _append(urls[2]))
        with pytest.raises(BuildError, match="changed after it was listed"):
            shardkit.build(str(tmp_path / "in"), out, options=options)
    assert any(name.startswith(".shardkit-build.journal") for name in os.listdir(out))
    assert any(name.startswith(".shard-") for name in os.listdir(out))  # parts of a first run
    with pytest.raises(BuildError, match="different options or inputs"):
        shardkit.build(str(tmp_path / "in"), out, options=options)
    overwritten = BuildOptions(workers=1, shuffle=False, max_count=4, overwrite=True)
    result = shardkit.build(str(tmp_path / "in"), out, options=overwritten)
    assert result.samples == 18


# ----------------------------------------------------------------- remote input shards
# Shards of 6 samples of 100 KB, above the 256 KiB a remote stream reads ahead: a
# change after the first sample was read is met by the reads that follow.


def _put_remote(store: str, root: Path, name: str, data: bytes) -> str:
    """``data`` stored under ``name`` in ``store`` (s3, gs, http); its URL."""
    if store == "http":
        path = root / name
        before = path.stat().st_mtime if path.exists() else 0.0
        path.write_bytes(data)
        mtime = max(path.stat().st_mtime, before + 10)  # nginx's ETag: mtime in seconds
        os.utime(path, (mtime, mtime))
        return f"{os.environ['SHARDKIT_TEST_HTTP_URL']}/{root.name}/{name}"
    if store == "s3":
        import s3fs

        s3 = s3fs.S3FileSystem(skip_instance_cache=True, **_s3_client())
        s3.pipe_file(f"{root.name}/{name}", data)
        return f"s3://{root.name}/{name}"
    import gcsfs

    gcs = gcsfs.GCSFileSystem(skip_instance_cache=True, **gcs_options())
    gcs.pipe_file(f"{root.name}/{name}", data)
    return f"gs://{root.name}/{name}"


def _s3_client() -> dict[str, Any]:
    options = s3_options()
    return {key: options[key] for key in ("endpoint_url", "key", "secret")}


@pytest.fixture(params=["s3", "gs", "http"])
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """(kind, where shards go: a bucket's name or nginx's folder)."""
    kind = request.param
    if kind == "http":
        folder, _ = http_service()
        return kind, Path(folder)
    name = f"changed-{uuid.uuid4().hex[:12]}"
    if kind == "s3":
        import s3fs

        monkeypatch.setenv("AWS_ENDPOINT_URL", s3_options()["endpoint_url"])
        s3fs.S3FileSystem(skip_instance_cache=True, **_s3_client()).mkdir(name)
    else:
        import gcsfs

        gcsfs.GCSFileSystem(skip_instance_cache=True, **gcs_options()).mkdir(name)
    return kind, Path(name)


@pytest.mark.parametrize("when", ["listed", "reading"])
def test_a_remote_shard_changed_after_listing_fails_the_build_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: Any, when: str
) -> None:
    kind, root = store
    local = _inputs(tmp_path / "in", size=100_000)
    other = _inputs(tmp_path / "other", text="y", size=100_000)[1]
    urls = [_put_remote(kind, root, os.path.basename(url), Path(url).read_bytes()) for url in local]
    name = os.path.basename(other)

    def change() -> None:
        _put_remote(kind, root, name, Path(other).read_bytes())  # same size, other bytes

    if when == "listed":
        _after_listing(monkeypatch, change)
    else:
        original = shards.ShardSource._read
        done: list[str] = []

        def read(self: shards.ShardSource, stream: Any, item: Any, url: str, *rest: Any) -> Any:
            sample = original(self, stream, item, url, *rest)
            if url == urls[1] and not done:
                done.append(url)
                change()
            return sample

        monkeypatch.setattr(shards.ShardSource, "_read", read)
    options = BuildOptions(workers=1, shuffle=False)
    with pytest.raises(BuildError, match="changed after it was listed") as caught:
        shardkit.build(
            urls[0].replace("000000", "{000000..000002}"), str(tmp_path / "out"), options=options
        )
    assert caught.value.url == urls[1]
