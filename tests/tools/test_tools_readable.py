"""show / stats / tsv as a person reads them (issue #13.16) and hostile text (issue #12.17)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
from pathlib import Path

import pytest
from helpers.build import write
from helpers.tools import shardkit, tar_bytes

import shardkit as sk
from shardkit.cli import COMMANDS, main
from shardkit.demo import make_jpeg
from shardkit.tools import stats

HOSTILE_KEY = "k\x1b[2J\x1b]0;owned\x07/x\r\u202eevil"
HOSTILE_TEXT = "clear:\x1b[2J nul:\x00 del:\x7f csi:\x9b tab:\t cr:\r rtl:\u202e end"
FORBIDDEN = ("\x1b", "\x00", "\x7f", "\x9b", "\r", "\u202e", "\x07")


def put(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def test_show_and_tsv_escape_control_characters(tmp_path: Path) -> None:
    sample = {"__key__": HOSTILE_KEY, "txt": HOSTILE_TEXT, "json": {"label": HOSTILE_TEXT}}
    src = put(tmp_path / "h.tar", tar_bytes([sample, {**sample, "__key__": "ok"}]))
    shown = shardkit("show", src)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode("utf-8")
    assert not any(ch in text for ch in FORBIDDEN), repr(text)
    assert "\\x1b[2J" in text and "\\u202e" in text
    table = shardkit("tsv", src, "-f", "__key__,txt,json.label")
    rows = table.stdout.decode("utf-8").split("\n")
    assert not any(ch in table.stdout.decode("utf-8") for ch in FORBIDDEN)
    assert len(rows) == 4 and rows[-1] == ""  # header, two rows, final newline
    assert all(row.count("\t") == 2 for row in rows[:-1])
    key, txt, label = rows[1].split("\t")
    assert key == "k\\x1b[2J\\x1b]0;owned\\x07/x\\r\\u202eevil"
    assert (
        txt
        == label
        == ("clear:\\x1b[2J nul:\\x00 del:\\x7f csi:\\x9b tab:\\t cr:\\r rtl:\\u202e end")
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["show", "SRC", "--fields", "jpg,nope"], "--fields 'nope'"),
        (["show", "SRC", "--grid", "OUT", "--image", "png"], "--image 'png'"),
        (["show", "SRC", "--grid", "OUT", "--label", "json_x.label"], "--label 'json_x.label'"),
        (["show", "SRC", "--grid", "OUT", "--label", "clss"], "--label 'clss'"),
        (["stats", "SRC", "--label", "labl"], "--label 'labl'"),
    ],
)
def test_unknown_field_names_are_refused_with_one_line(
    tmp_path: Path, args: list[str], named: str
) -> None:
    jpeg = make_jpeg(random.Random(0), 0)
    src = put(tmp_path / "s.tar", tar_bytes([{"__key__": "a", "jpg": jpeg, "cls": b"1"}]))
    argv = [src if a == "SRC" else str(tmp_path / "g.png") if a == "OUT" else a for a in args]
    done = shardkit(*argv)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("Error: "), lines
    assert named in lines[0] and "jpg, cls" in lines[0]
    assert not os.path.exists(tmp_path / "g.png")


def _folder(root: Path, classes: list[str], per_class: int = 2) -> str:
    rng = random.Random(1)
    for index, name in enumerate(classes):
        for i in range(per_class):
            write(str(root), f"{name}/{i}.jpg", make_jpeg(rng, index, min_side=40, max_side=80))
    return str(root)


def test_stats_and_grid_show_class_names_from_the_manifest(tmp_path: Path) -> None:
    src = _folder(tmp_path / "src", ["emu", "\u00f1and\u00fa"])
    for fmt in ("tar", "tfrecord"):
        out = str(tmp_path / fmt)
        sk.build(src, out, options=sk.BuildOptions(format=fmt, workers=1))
        done = shardkit("stats", out, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["classes"] == {"emu": 2, "\u00f1and\u00fa": 2}
        text = shardkit("stats", out).stdout.decode()
        assert "  \u00f1and\u00fa\t2" in text
        shown = shardkit("show", out, "-c", "4").stdout.decode()
        assert shown.count(" (emu)") == shown.count(" (\u00f1and\u00fa)") == 2


def test_stats_plot_draws_an_image_size_histogram(tmp_path: Path) -> None:
    from PIL import Image

    src = _folder(tmp_path / "src", ["a", "b"], per_class=5)
    out = str(tmp_path / "out")
    sk.build(src, out, options=sk.BuildOptions(workers=1))
    result = stats(out, image_sizes=True)
    assert len(result.image_sizes) == 10
    assert all(40 <= w <= 80 and 40 <= h <= 80 for w, h in result.image_sizes)
    plot = str(tmp_path / "p.png")
    assert shardkit("stats", out, "--plot", plot).returncode == 0
    with Image.open(plot) as img:
        assert img.size == (1800, 400)  # sample sizes, image sizes, classes


def test_contact_sheet_labels_render_non_ascii_names(tmp_path: Path) -> None:
    """A label of letters the font lacks draws as boxes: it must differ from one of
    characters no font has."""
    from PIL import Image, ImageChops

    jpeg = make_jpeg(random.Random(2), 0)
    strips = []
    for name, label in (("n", "\u00f1\u00fa\u00f1\u00fa\u00f1"), ("x", "\U000f0000" * 5)):
        sample = {"__key__": "a", "jpg": jpeg, "json": json.dumps({"label": label}).encode()}
        src = put(tmp_path / f"{name}.tar", tar_bytes([sample]))
        sheet = str(tmp_path / f"{name}.png")
        done = shardkit("show", src, "--grid", sheet, "--label", "json.label")
        assert done.returncode == 0, done.stderr
        with Image.open(sheet) as img:
            strips.append(img.convert("RGB").crop((0, 140, 160, 160)))
    assert ImageChops.difference(*strips).getbbox() is not None


def test_help_is_plain_text_and_shows_defaults() -> None:
    texts = {}
    for command in COMMANDS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0
        texts[command] = out.getvalue()
        assert "``" not in texts[command] and ":func:" not in texts[command], command
    assert "samples per shard (default: 10000)" in texts["build"]
    assert "shuffle seed (default: 0)" in texts["build"]
    assert "grid columns (default: 8)" in texts["show"]
    assert "(default: None)" not in "".join(texts.values())


def test_contact_sheet_falls_back_to_pillows_font_without_matplotlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from shardkit.tools import contact_sheet

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name)
    )
    jpeg = make_jpeg(random.Random(3), 1)
    samples = [{"__key__": "\u00f1", "jpg": jpeg, "cls": b"1"}]
    sheet = contact_sheet(samples, str(tmp_path / "s.png"), tile=64)
    assert sheet.size == (64, 64) and os.path.getsize(tmp_path / "s.png") > 0
