"""Media fields read with ``copy=False`` decode where they lie: shardkit.video() and
shardkit.audio() read the memoryview of the memory-mapped shard through codecs.ViewFile,
never a copy of the field (what Python allocates while a sample decodes stays well under
the field's size; with ``copy=True`` the same measure sees the field's bytes)."""

from __future__ import annotations

import io
import mmap
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import soundfile

import shardkit
from shardkit.codecs import Decoder
from shardkit.codecs._viewfile import ViewFile


def _noise_mp4(frames: int, width: int = 320, height: int = 240) -> bytes:
    """Lossless H.264 of scrolling noise: a field several times its decoded clip."""
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 255, (height, width, 3), np.uint8)
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=30, options={"preset": "ultrafast", "qp": "0"})
        stream.width, stream.height, stream.pix_fmt, stream.gop_size = width, height, "yuv420p", 30
        for i in range(frames):
            image = np.roll(noise, i, axis=1)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buffer.getvalue()


def _stereo_wav(seconds: int = 60, rate: int = 48000) -> bytes:
    rng = np.random.default_rng(1)
    samples = rng.uniform(-0.5, 0.5, (seconds * rate, 2)).astype(np.float32)
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def _peak(first: Callable[[], Any]) -> tuple[Any, int]:
    """``first()`` and the most bytes Python held at once while it ran."""
    tracemalloc.start()
    try:
        value = first()
        return value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _first(dataset: Any) -> Callable[[], Any]:
    """The dataset's first sample, its shards listed before the measure starts."""
    dataset.shards  # noqa: B018 (resolving the listing reads .idx files: not the decode)
    items: Iterator[Any] = iter(dataset)
    return lambda: next(items)


def _decoding(shard: Path, spec: Any, field: str, *, copy: bool) -> tuple[Any, int, int]:
    """The field of the first sample decoded by ``spec``, what Python held at most while
    it was read and decoded, and what reading it alone held (the reader's buffer, and
    with ``copy=True`` the field)."""
    _, reading = _peak(_first(shardkit.Dataset(str(shard), copy=copy)))
    dataset = shardkit.Dataset(str(shard), copy=copy).decode(spec, only=field, threads=1)
    sample, peak = _peak(_first(dataset))
    return sample[field], peak, reading


@pytest.fixture(scope="module")
def media_shard(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, bytes]:
    folder = tmp_path_factory.mktemp("media")
    video, sound = _noise_mp4(120), _stereo_wav()
    with shardkit.ShardWriter(str(folder / "media-%06d.tar")) as writer:
        writer.write({"__key__": "s0", "mp4": video, "wav": sound, "txt": "noise"})
    return folder / "media-000000.tar", video, sound


def test_a_clip_from_a_mapped_field_never_copies_the_field(
    media_shard: tuple[Path, bytes, bytes],
) -> None:
    shard, video, _ = media_shard

    spec = shardkit.video(frames=4, start=2.0)
    copied, copied_peak, _ = _decoding(shard, spec, "mp4", copy=True)
    mapped, peak, reading = _decoding(shard, spec, "mp4", copy=False)
    np.testing.assert_array_equal(mapped.frames, copied.frames)
    np.testing.assert_array_equal(mapped.times, copied.times)
    clip = mapped.frames.nbytes
    assert len(video) > 4 * clip  # the field dwarfs the clip, so a copy would show
    assert copied_peak > len(video)  # the measure sees a field's bytes when they are made
    assert clip <= peak - reading < clip + len(video) // 4, (peak, reading, clip, len(video))


def test_an_indexed_dataset_decodes_its_mapped_field_in_place(
    media_shard: tuple[Path, bytes, bytes],
) -> None:
    shard, video, _ = media_shard
    dataset = shardkit.IndexedDataset(str(shard), copy=False).decode(
        shardkit.video(frames=4, start=2.0), only="mp4"
    )
    len(dataset)  # the listing and the .idx are read before the measure
    sample, peak = _peak(lambda: dataset[0])
    clip = sample["mp4"].frames.nbytes
    assert clip <= peak < clip + len(video) // 4, (peak, clip, len(video))


def test_audio_from_a_mapped_field_holds_the_samples_once(
    media_shard: tuple[Path, bytes, bytes],
) -> None:
    shard, _, sound = media_shard
    (samples, rate), peak, reading = _decoding(shard, shardkit.audio(), "wav", copy=False)
    expected, _ = soundfile.read(io.BytesIO(sound), dtype="float32", always_2d=True)
    np.testing.assert_array_equal(samples, expected.T)
    assert rate == 48000 and samples.flags.c_contiguous
    # The result and one block of frames: not the field, not the samples twice.
    extra = peak - reading
    assert samples.nbytes <= extra < samples.nbytes + len(sound) // 2, (extra, samples.nbytes)


def test_a_view_file_reads_seeks_and_tells_as_a_bytes_file(tmp_path: Path) -> None:
    data = bytes(range(256)) * 40
    path = tmp_path / "field"
    path.write_bytes(data)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)[100:9000]  # read-only, like a copy=False field
        ours, theirs = ViewFile(view), io.BytesIO(data[100:9000])
        for move in [(0, io.SEEK_END), (-10, io.SEEK_END), (5, io.SEEK_SET), (7, io.SEEK_CUR)]:
            assert ours.seek(*move) == theirs.seek(*move)
            assert ours.read(33) == theirs.read(33) and ours.tell() == theirs.tell()
        ours.seek(9999)  # past the end reads nothing, as a file does
        assert ours.read(10) == b"" and ours.readinto(bytearray(4)) == 0
        ours.seek(8890)
        buffer = bytearray(16)
        assert ours.readinto(buffer) == 10 and bytes(buffer[:10]) == data[8990:9000]
        assert ours.seek(0) == 0 and ours.read() == data[100:9000]
        with pytest.raises(ValueError, match="negative seek"):
            ours.seek(-1)
        assert ours.readable() and ours.seekable() and not ours.writable()
        ours.close()
        view.release()  # the view file let go of the mapping: it can close
    with pytest.raises(TypeError):
        ViewFile("not a buffer")  # type: ignore[arg-type]


def test_handlers_that_do_not_read_views_still_get_bytes() -> None:
    seen: list[type] = []

    def handler(ext: str, data: bytes) -> Any:
        seen.append(type(data))
        return None

    out = Decoder(handler, shardkit.video(frames=1))({"__key__": "a", "txt": memoryview(b"hi")})
    assert out["txt"] == "hi" and seen == [bytes]
