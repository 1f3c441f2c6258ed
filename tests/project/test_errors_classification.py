"""Only data errors go through ``handler=`` / ``on_error``: bugs and missing modules propagate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import PIL.Image
import PIL.ImageFile
import pytest
from helpers.build import make_png, write

import shardkit
from shardkit import BuildOptions
from shardkit.codecs import Codecs, Decoder
from shardkit.errors import DecodeError, StorageError


def _shard(tmp_path: Path, **fields: bytes) -> str:
    url = str(tmp_path / "s-000000.tar")
    with shardkit.ShardWriter(str(tmp_path / "s-%06d.tar")) as sink:
        for i in range(3):
            sink.write({"__key__": f"k{i}", **fields})
    return url


def _buggy_handler(ext: str, data: bytes) -> Any:
    return undefined_name  # type: ignore[name-defined]  # noqa: F821  the user's bug


def test_a_bug_in_a_decode_handler_propagates_whatever_the_handler(tmp_path: Path) -> None:
    """Regression (#11): the NameError became a DecodeError, so handler="warn" dropped every
    sample and the epoch was empty."""
    url = _shard(tmp_path, txt=b"hello")
    for policy in ("warn", "ignore"):
        ds = shardkit.Dataset(url, handler=policy).decode(_buggy_handler)
        with pytest.raises(NameError):
            list(ds)


def _buggy_decoder(data: bytes) -> Any:
    raise AttributeError("'NoneType' object has no attribute 'decode'")  # the user's bug


def _strict_decoder(data: bytes) -> Any:
    raise ValueError("not my format")  # what a decoding library says about bad bytes


def test_registered_decoders_bad_bytes_are_data_but_bugs_propagate() -> None:
    codecs = Codecs()
    codecs.register("bug", decoder=_buggy_decoder)
    codecs.register("strict", decoder=_strict_decoder)
    decoder = Decoder(codecs=codecs)
    with pytest.raises(AttributeError):
        decoder({"__key__": "k", "bug": b"x"})
    with pytest.raises(DecodeError, match=r"field 'strict'.*not my format") as info:
        decoder({"__key__": "k", "__url__": "u.tar", "strict": b"x"})
    assert (info.value.key, info.value.url) == ("k", "u.tar")


def _buggy_encoder(value: Any) -> bytes:
    return bytes(undefined_codec.pack(value))  # type: ignore[name-defined]  # noqa: F821


def test_a_bug_in_a_registered_encoder_propagates_but_bad_values_are_encode_errors(
    tmp_path: Path,
) -> None:
    """The encoding side of #11 bug 2: every exception became EncodeError (a DataError), so
    a build from Python samples with on_error="skip" dropped every sample."""
    from shardkit.errors import EncodeError

    codecs = Codecs()
    codecs.register("pts", encoder=_buggy_encoder)
    with pytest.raises(NameError):
        codecs.encode_sample({"__key__": "k", "pts": [1, 2]})
    with pytest.raises(EncodeError, match="cannot pickle"):
        codecs.encode_sample({"__key__": "k", "pyd": lambda: 1})
    with pytest.raises(EncodeError, match="not JSON serializable"):
        codecs.encode_sample({"__key__": "k", "json": {1, 2}})


def _png_folder(tmp_path: Path) -> str:
    folder = str(tmp_path / "src")
    for i in range(4):
        write(folder, f"c{i % 2}/{i}.png", make_png(i, (64, 48)))
    return folder


def _bug(*args: Any, **kwargs: Any) -> Any:
    raise NameError("name 'plugin_state' is not defined")  # a bug, not a broken image


def test_a_bug_while_resizing_fails_the_build_instead_of_skipping_every_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (#11): builder/_transform.py turned every exception into "cannot decode"."""
    folder = _png_folder(tmp_path)
    monkeypatch.setattr(PIL.Image.Image, "resize", _bug)
    options = BuildOptions(workers=1, resize=16, on_error="skip")
    with pytest.raises(NameError, match="plugin_state"):
        shardkit.build(folder, str(tmp_path / "out"), options=options)


def test_a_bug_while_validating_fails_the_build_instead_of_skipping_every_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (#11): builder/_validate.py turned every exception into "cannot decode"."""
    folder = _png_folder(tmp_path)
    monkeypatch.setattr(PIL.ImageFile.ImageFile, "load", _bug)
    options = BuildOptions(workers=1, validate="full", on_error="skip")
    with pytest.raises(NameError, match="plugin_state"):
        shardkit.build(folder, str(tmp_path / "out"), options=options)
    assert not os.path.exists(tmp_path / "out" / "manifest.json")


# -- a missing optional module is one line naming the extra, never bad data ----------

_WITHOUT = """
import sys
for name in {hidden!r}:
    sys.modules[name] = None  # what a core-only install looks like to `import name`
{body}
"""


def _without(hidden: tuple[str, ...], body: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = _WITHOUT.format(hidden=hidden, body=body)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def _cli_without(
    hidden: tuple[str, ...], cwd: Path, *argv: str
) -> subprocess.CompletedProcess[str]:
    return _without(hidden, f"from shardkit.cli import main\nsys.exit(main({list(argv)!r}))", cwd)


def _one_error_line(result: subprocess.CompletedProcess[str], install: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert f"pip install '{install}'" in lines[0]


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("deps")
    with shardkit.ShardWriter(str(folder / "img-%06d.tar")) as sink:
        for i in range(4):
            sink.write({"__key__": f"k{i}", "png": make_png(i), "cls": i % 2})
    return folder


@pytest.mark.parametrize("handler", ["warn", "ignore", "raise"])
def test_decoding_images_without_pillow_names_the_extra(images: Path, handler: str) -> None:
    """Regression (#13.1): handler="warn" yielded 0 samples while len() said 4."""
    body = f"""
import shardkit
from shardkit.errors import MissingDependencyError
ds = shardkit.Dataset("img-000000.tar", handler={handler!r}).decode("rgb8")
try:
    print(len(list(ds)))
except MissingDependencyError as exc:
    print("missing:", exc)
"""
    result = _without(("PIL", "PIL.Image", "simplejpeg"), body, images)
    assert result.stdout.strip() == (
        "missing: decoding images needs Pillow, which is not installed: "
        "pip install 'shardkit[images]'"
    ), result.stdout + result.stderr


def test_verify_decode_without_pillow_is_one_line_not_every_image_corrupt(images: Path) -> None:
    result = _cli_without(("PIL", "PIL.Image", "simplejpeg"), images, "verify", "--decode", ".")
    _one_error_line(result, "shardkit[images]")
    assert "corrupt" not in result.stdout + result.stderr


def test_demo_without_pillow_is_one_line(tmp_path: Path) -> None:
    result = _cli_without(("PIL", "PIL.Image"), tmp_path, "demo", "out")
    _one_error_line(result, "shardkit[images]")
    assert not (tmp_path / "out").exists()


def test_show_grid_without_pillow_is_one_line(images: Path, tmp_path: Path) -> None:
    sheet = str(tmp_path / "sheet.png")
    result = _cli_without(("PIL", "PIL.Image"), images, "show", ".", "--grid", sheet)
    _one_error_line(result, "shardkit[images]")


def test_stats_plot_without_matplotlib_is_one_line(images: Path, tmp_path: Path) -> None:
    plot = str(tmp_path / "plot.png")
    result = _cli_without(("matplotlib",), images, "stats", ".", "--plot", plot)
    _one_error_line(result, "shardkit[plot]")


@pytest.mark.parametrize(
    ("module", "url", "extra"),
    [("s3fs", "s3://bucket/s.tar", "s3"), ("gcsfs", "gs://bucket/s.tar", "gcs")],
)
def test_remote_urls_without_their_filesystem_name_the_extra(
    tmp_path: Path, module: str, url: str, extra: str
) -> None:
    result = _cli_without((module,), tmp_path, "verify", url)
    _one_error_line(result, f"shardkit[{extra}]")


@pytest.mark.parametrize(
    "call",
    [
        "list(shardkit.Dataset('s3://bucket/data/'))",  # lists a folder
        "shardkit.build('img-000000.tar', 's3://bucket/out')",  # an object-store output
    ],
    ids=["dataset-folder", "build-output"],
)
def test_every_entry_point_names_the_extra_of_a_missing_filesystem(images: Path, call: str) -> None:
    """Regression: the folder listing and the build's object store each opened fsspec
    themselves (a bare ImportError; the build said "cannot open this URL scheme")."""
    body = f"""
import shardkit
from shardkit.errors import MissingDependencyError
try:
    {call}
except MissingDependencyError as exc:
    print("missing:", exc)
"""
    result = _without(("s3fs",), body, images)
    assert result.stdout.strip() == (
        "missing: s3:// URLs needs s3fs, which is not installed: pip install 'shardkit[s3]'"
    ), result.stdout + result.stderr


def test_a_folder_url_of_an_unknown_scheme_is_a_storage_error() -> None:
    with pytest.raises(StorageError, match="cannot open this URL scheme"):
        list(shardkit.Dataset("nosuch://bucket/data/"))


@pytest.mark.parametrize(("module", "engine"), [("ray", "ray"), ("distributed", "dask")])
def test_cluster_engines_without_their_package_name_the_extra(
    images: Path, tmp_path: Path, module: str, engine: str
) -> None:
    out = str(tmp_path / "out")
    result = _cli_without((module,), images, "build", "img-000000.tar", out, "--engine", engine)
    _one_error_line(result, f"shardkit[{engine}]")
