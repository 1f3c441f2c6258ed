"""Audio fields: cheap validation (codecs.check_field) and shardkit.audio() decoding, on
files soundfile writes here (wav, flac, ogg/vorbis, ogg/opus, mp3)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import shardkit
from shardkit.codecs import check_field, field_check
from shardkit.errors import DataError, DecodeError, MissingDependencyError

RATE = 48000
# (extension, soundfile format, subtype): each kind check_field takes.
KINDS = [
    ("wav", "WAV", "PCM_16"),
    ("flac", "FLAC", "PCM_16"),
    ("ogg", "OGG", "VORBIS"),
    ("opus", "OGG", "OPUS"),
    ("mp3", "MP3", "MPEG_LAYER_III"),
]


def _tone(frames: int = RATE, channels: int = 2) -> np.ndarray:
    t = np.arange(frames, dtype=np.float32) / RATE
    return np.stack([0.5 * np.sin(2 * np.pi * 440 * (c + 1) * t) for c in range(channels)], 1)


def _encode(fmt: str, subtype: str, samples: np.ndarray, rate: int = RATE) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


@pytest.mark.parametrize(("ext", "fmt", "subtype"), KINDS)
def test_a_whole_file_passes_and_every_cut_copy_is_rejected(
    ext: str, fmt: str, subtype: str
) -> None:
    data = _encode(fmt, subtype, _tone())
    check_field(data, ext)  # whole: no error
    for cut in (len(data) - 1, len(data) * 2 // 3, len(data) // 3, 64):
        with pytest.raises(DataError, match=r"truncated|unreadable"):
            check_field(data[:cut], ext)


def test_the_reasons_name_what_is_wrong() -> None:
    wav = _encode("WAV", "PCM_16", _tone())
    with pytest.raises(DataError, match=r"^truncated WAV \(1000 of 192044 bytes\)$"):
        check_field(wav[:1000], "wav")
    with pytest.raises(DataError, match=r"^empty file$"):
        check_field(b"", "flac")
    with pytest.raises(DataError, match=r"unreadable or truncated FLAC audio"):
        check_field(b"not audio at all, just some text" * 10, "flac")
    ogg = _encode("OGG", "VORBIS", _tone())
    with pytest.raises(DataError, match=r"truncated Ogg \("):
        check_field(ogg[:-10], "ogg")


def test_the_check_is_found_by_the_last_extension_component() -> None:
    assert field_check("speech.FLAC") is field_check("flac") is not None
    assert field_check("wav") is field_check("opus")  # one audio check for every kind
    assert field_check("cls") is None
    check_field(b"\xff\xfe", "cls")  # no check: passes


@pytest.mark.parametrize(("ext", "fmt", "subtype"), KINDS)
def test_audio_decodes_to_float32_channels_by_frames_and_its_rate(
    ext: str, fmt: str, subtype: str
) -> None:
    rate = 48000 if ext == "opus" else 16000  # Opus runs at 48 kHz only
    tone = _tone(rate // 2, 2)
    got = shardkit.audio()(ext, _encode(fmt, subtype, tone, rate))
    assert got is not None
    samples, got_rate = got
    assert got_rate == rate
    assert samples.dtype == np.float32 and samples.flags.c_contiguous
    assert samples.shape[0] == 2
    if ext in ("wav", "flac"):  # lossless: the samples themselves come back
        assert samples.shape == (2, rate // 2)
        np.testing.assert_allclose(samples, tone.T, atol=1 / 32768)
    else:  # lossy codecs may pad; the length is close
        assert abs(samples.shape[1] - rate // 2) < rate // 10


def test_mono_and_torch_outputs() -> None:
    import torch

    data = _encode("WAV", "FLOAT", _tone(1000, 2))
    mono = shardkit.audio(mono=True)("wav", data)
    assert mono is not None and mono.samples.shape == (1, 1000)
    np.testing.assert_allclose(mono.samples[0], _tone(1000, 2).mean(1), rtol=1e-6)
    tensor = shardkit.audio(torch=True)("wav", data)
    assert tensor is not None
    assert isinstance(tensor.samples, torch.Tensor) and tensor.samples.dtype == torch.float32
    assert tuple(tensor.samples.shape) == (2, 1000) and tensor.rate == RATE


def test_other_fields_pass_to_the_next_decoder_and_bad_audio_is_a_decode_error() -> None:
    decoder = shardkit.codecs.Decoder(shardkit.audio())
    data = _encode("FLAC", "PCM_16", _tone(800, 1))
    out = decoder({"__key__": "k", "flac": data, "txt": b"hello"})
    assert out["txt"] == "hello"
    assert out["flac"].samples.shape == (1, 800) and out["flac"].rate == RATE
    with pytest.raises(DecodeError) as info:
        decoder({"__key__": "k", "flac": b"garbage" * 20})
    assert info.value.key == "k"


def test_through_a_dataset(tmp_path: Path) -> None:
    """The same code as docs/reading.md's audio example."""
    shard = tmp_path / "speech-000000.tar"
    with shardkit.ShardWriter(str(tmp_path / "speech-%06d.tar")) as writer:
        for i in range(3):
            flac = _encode("FLAC", "PCM_16", _tone(RATE // 10 * (i + 1), 1))
            writer.write({"__key__": f"utt{i}", "flac": flac, "txt": f"utterance {i}"})
    assert shard.exists()

    dataset = shardkit.Dataset(str(shard)).decode(shardkit.audio()).to_tuple("flac", "txt")
    lengths = []
    for (samples, rate), text in dataset:
        assert samples.dtype == np.float32 and samples.shape[0] == 1 and rate == 48000
        lengths.append(samples.shape[1])
        assert text.startswith("utterance ")
    assert lengths == [4800, 9600, 14400]


def test_without_soundfile_it_is_a_missing_dependency_not_bad_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _encode("FLAC", "PCM_16", _tone(100, 1))
    monkeypatch.setitem(sys.modules, "soundfile", None)
    for call in (lambda: check_field(data, "flac"), lambda: shardkit.audio()("flac", data)):
        with pytest.raises(MissingDependencyError) as info:
            call()
        assert not isinstance(info.value, DataError)
        assert "pip install 'shardkit[audio]'" in info.value.message


def test_an_mp3_cut_exactly_between_frames_is_caught_by_its_declared_frame_count() -> None:
    from shardkit.codecs._audio import _mpeg_frame

    data = _encode("MP3", "MPEG_LAYER_III", _tone(RATE, 1))
    size = data[6:10]  # after soundfile's ID3v2 tag: frames back to back
    pos = 10 + (size[0] << 21 | size[1] << 14 | size[2] << 7 | size[3]) if data[:3] == b"ID3" else 0
    ends = []
    while (length := _mpeg_frame(data, pos)) is not None:
        pos += length
        ends.append(pos)
    assert ends[-1] == len(data)  # the walk covers the file
    for cut in (ends[-2], ends[len(ends) // 2]):
        with pytest.raises(DataError, match=r"^truncated MP3 \(\d+ of the \d+ frames"):
            check_field(data[:cut], "mp3")
