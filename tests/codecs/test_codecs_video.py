"""Video fields: cheap validation (codecs.check_field) and shardkit.video() clips, on
videos PyAV encodes here (mp4 with libx264 and mpeg4, webm with VP8, mkv)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import av
import numpy as np
import pytest

import shardkit
from shardkit.codecs import check_field
from shardkit.codecs._video import read_clip
from shardkit.errors import ConfigError, DataError, DecodeError, MissingDependencyError
from shardkit.pipeline._context import Context

FPS = 30
GOP = 30  # a keyframe every second


def _encode(container: str, codec: str, frames: int, size: tuple[int, int] = (64, 48)) -> bytes:
    """A video whose frame i is flat grey level 8 * (i % 30) (far apart after lossy coding)."""
    width, height = size
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as out:
        options = {"deadline": "realtime", "cpu-used": "8"} if codec == "libvpx" else {}
        stream = out.add_stream(codec, rate=FPS, options=options)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.gop_size = GOP
        for i in range(frames):
            level = 8 * (i % 30)
            image = np.full((height, width, 3), level, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def long_mp4() -> bytes:
    return _encode("mp4", "libx264", 300)


KINDS = [("mp4", "mp4", "libx264"), ("mp4", "mp4", "mpeg4"), ("webm", "webm", "libvpx")]
KINDS.append(("mkv", "matroska", "mpeg4"))


@pytest.mark.parametrize(("ext", "container", "codec"), KINDS)
def test_a_whole_video_passes_and_every_cut_copy_is_rejected(
    ext: str, container: str, codec: str
) -> None:
    data = _encode(container, codec, 40)
    check_field(data, ext)
    for cut in (len(data) - 1, len(data) * 2 // 3, len(data) // 3, 64):
        with pytest.raises(DataError, match=r"^truncated (MP4|Matroska/WebM) "):
            check_field(data[:cut], ext)


def test_what_is_not_a_video_or_has_no_video_stream_is_named() -> None:
    with pytest.raises(DataError, match=r"^empty file$"):
        check_field(b"", "mp4")
    with pytest.raises(DataError, match=r"not a readable MP4 video"):
        check_field(b"this is a caption, not a video" * 10, "mp4")
    audio_only = io.BytesIO()
    with av.open(audio_only, mode="w", format="matroska") as out:
        stream = out.add_stream("pcm_s16le", rate=8000)
        frame = av.AudioFrame.from_ndarray(
            np.zeros((1, 800), np.int16), format="s16", layout="mono"
        )
        frame.sample_rate = 8000
        for packet in [*stream.encode(frame), *stream.encode()]:
            out.mux(packet)
    with pytest.raises(DataError, match=r"^no video stream in MKV file$"):
        check_field(audio_only.getvalue(), "mkv")


def test_a_clip_has_its_frames_timestamps_and_pixels(long_mp4: bytes) -> None:
    clip = shardkit.video(frames=8, start=5.0)("mp4", long_mp4)
    assert clip is not None
    frames, times = clip
    assert frames.dtype == np.uint8 and frames.shape == (8, 48, 64, 3)
    np.testing.assert_allclose(times, (150 + np.arange(8)) / FPS)
    # Frame i is grey level 8 * (i % 30): frames 150.. are 0, 8, 16, ... (lossy: +-3)
    np.testing.assert_allclose(frames.mean(axis=(1, 2, 3)), 8 * np.arange(8), atol=3)


def test_a_clip_from_the_middle_seeks_instead_of_decoding_from_the_start(long_mp4: bytes) -> None:
    # Keyframes every GOP frames: a clip starting at frame f decodes the f % GOP frames
    # since the keyframe at or before it, then its own 16; decoding from the start
    # would take f + 16.
    for start in (0.0, 5.0, 5.5, 5.9, 9.0):  # frames 0, 150 (a keyframe), 165, 177, 270
        first = round(start * FPS)
        result = read_clip(long_mp4, 16, start=start, fraction=0.0)
        assert result.decoded == 16 + first % GOP, (start, result.decoded)
        np.testing.assert_allclose(result.clip.times, (first + np.arange(16)) / FPS)


def test_clip_positions_follow_seed_epoch_rank_and_worker(long_mp4: bytes) -> None:
    spec = shardkit.video(frames=4)

    def start_of(ctx: Context) -> float:
        clip = spec.for_stream(ctx)("mp4", long_mp4)
        assert clip is not None
        return float(clip.times[0])

    first = start_of(Context(seed=1, epoch=0))
    assert start_of(Context(seed=1, epoch=0)) == first  # a rerun: the same clip
    others = {start_of(Context(seed=1, epoch=e)) for e in range(1, 6)}
    others |= {start_of(Context(seed=2, epoch=0)), start_of(Context(seed=1, epoch=0, rank=1))}
    assert len(others - {first}) >= 5  # other epochs, seeds and ranks see other clips
    for start in others:
        assert 0 <= start <= (300 - 4) / FPS


def test_torch_output_and_option_errors(long_mp4: bytes) -> None:
    import torch

    clip = shardkit.video(frames=3, start=0, torch=True)("mp4", long_mp4)
    assert clip is not None
    assert clip.frames.dtype == torch.uint8 and tuple(clip.frames.shape) == (3, 48, 64, 3)
    assert clip.times.dtype == torch.float64
    with pytest.raises(ConfigError, match=r"frames="):
        shardkit.video(frames=0)
    with pytest.raises(ConfigError, match=r"start="):
        shardkit.video(start=-1.0)


def test_a_video_shorter_than_the_clip_is_a_decode_error() -> None:
    decoder = shardkit.codecs.Decoder(shardkit.video(frames=20))
    short = _encode("mp4", "mpeg4", 10)
    with pytest.raises(DecodeError, match=r"the clip needs 20") as info:
        decoder({"__key__": "v1", "mp4": short})
    assert info.value.key == "v1"


def test_through_a_dataset_each_epoch_draws_its_clips(tmp_path: Path) -> None:
    """The same code as docs/reading.md's video example."""
    with shardkit.ShardWriter(str(tmp_path / "clips-%06d.tar")) as writer:
        for i in range(2):
            writer.write({"__key__": f"v{i}", "mp4": _encode("mp4", "mpeg4", 90), "txt": "a cat"})

    dataset = (
        shardkit.Dataset(str(tmp_path / "clips-000000.tar"), seed=7)
        .decode(shardkit.video(frames=4))
        .to_tuple("mp4", "txt")
    )

    def starts(epoch: int) -> list[float]:
        dataset.set_epoch(epoch)
        out = []
        for (frames, times), caption in dataset:
            assert frames.shape == (4, 48, 64, 3) and caption == "a cat"
            out.append(float(times[0]))
        return out

    epochs = [starts(epoch) for epoch in range(3)]
    assert starts(0) == epochs[0]  # a rerun of an epoch sees its clips again
    assert len({tuple(e) for e in epochs}) == 3  # each epoch draws its own


def test_without_pyav_it_is_a_missing_dependency_not_bad_data(
    monkeypatch: pytest.MonkeyPatch, long_mp4: bytes
) -> None:
    monkeypatch.setitem(sys.modules, "av", None)
    for call in (
        lambda: check_field(long_mp4, "mp4"),
        lambda: shardkit.video(frames=2)("mp4", long_mp4),
    ):
        with pytest.raises(MissingDependencyError) as info:
            call()
        assert not isinstance(info.value, DataError)
        assert "pip install 'shardkit[video]'" in info.value.message


@pytest.mark.parametrize(("ext", "container", "codec"), KINDS)
def test_clips_from_every_container_have_their_timestamps(
    ext: str, container: str, codec: str
) -> None:
    data = _encode(container, codec, 90)
    clip = shardkit.video(frames=4, start=1.5)(ext, data)
    assert clip is not None and clip.frames.shape == (4, 48, 64, 3)
    np.testing.assert_allclose(clip.times, (45 + np.arange(4)) / FPS, atol=1e-3)  # mkv: ms
    np.testing.assert_allclose(clip.frames.mean(axis=(1, 2, 3)), 8 * (15 + np.arange(4)), atol=4)
