"""Every string shardkit prints is escaped and bounded: keys, file names, URLs and messages
from the data never reach the terminal raw, and every error is one line of bounded size
(errors.escape_controls / errors.shorten, the CLI's print_error and log formatter)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers.tools import tar_bytes

from shardkit.cli import main
from shardkit.errors import MESSAGE_LIMIT, NAME_LIMIT, ShardkitError, StorageError, escape_controls

HOSTILE = "k\x1b[2J\x1b]0;owned\x07\r\nline\u202e\x9b\x00"
RAW = ("\x1b", "\x00", "\x07", "\x9b", "\r", "\u202e")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def assert_printable(text: str) -> None:
    assert not any(ch in text for ch in RAW), repr(text[:2000])


@pytest.fixture
def hostile_dir(tmp_path: Path) -> Path:
    """A folder whose name, shard names and keys all hold escape sequences and newlines."""
    folder = tmp_path / f"d{HOSTILE}".replace("\x00", "")
    folder.mkdir()
    sample = {"__key__": HOSTILE.replace("\x00", ""), "txt": HOSTILE, "cls": b"1"}
    data = tar_bytes([sample, {**sample, "__key__": "plain"}])
    (folder / f"s{HOSTILE}.tar".replace("\x00", "")).write_bytes(data)
    return folder


def shard_of(folder: Path) -> str:
    return str(next(folder.glob("*.tar")))


@pytest.mark.parametrize(
    "argv",
    [
        ("verify", "{shard}"),
        ("stats", "{shard}"),
        ("show", "{shard}"),
        ("tsv", "{shard}", "-f", "__key__,txt"),
        ("index", "-v", "{shard}"),
        ("cat", "{shard}", "-o", "{out}"),
        ("split", "{shard}", "--max-count", "1", "-o", "{out}-%06d.tar"),
    ],
    ids=lambda argv: argv[0],
)
def test_tools_print_hostile_names_escaped(
    capsys: pytest.CaptureFixture[str], hostile_dir: Path, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    out = str(tmp_path / f"o{HOSTILE}".replace("\x00", "").replace("%", ""))
    args = [a.format(shard=shard_of(hostile_dir), out=out) for a in argv]
    status, stdout, stderr = run(capsys, *args)
    assert status == 0, stderr
    assert_printable(stdout + stderr)


def test_verify_problem_lines_are_escaped_and_one_line_each(
    capsys: pytest.CaptureFixture[str], hostile_dir: Path
) -> None:
    shard = Path(shard_of(hostile_dir))
    shard.write_bytes(shard.read_bytes()[:700])  # truncated inside the second member
    status, stdout, stderr = run(capsys, "verify", str(shard))
    assert status == 1
    assert_printable(stdout + stderr)
    lines = stdout.splitlines()
    assert lines and all(line.count("\t") == 3 for line in lines), stdout
    assert "\\x1b[2J" in stdout


@pytest.mark.parametrize(
    "argv",
    [
        ("verify", "{missing}"),
        ("cat", "{missing}"),
        ("stats", "{missing}"),
        ("show", "{missing}"),
        ("index", "{missing}"),
        ("tsv", "{missing}"),
        ("build", "{missing}", "{out}"),
        ("show", "{shard}", "--fields", HOSTILE),
        ("tsv", "{shard}", "--bogus", HOSTILE),
        (HOSTILE,),
    ],
    ids=lambda argv: argv[0].encode("unicode_escape").decode()[:12],
)
def test_errors_are_one_escaped_line(
    capsys: pytest.CaptureFixture[str], hostile_dir: Path, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    missing = str(hostile_dir / f"missing{HOSTILE}.tar".replace("\x00", ""))
    out = str(tmp_path / "out")
    args = [a.format(shard=shard_of(hostile_dir), missing=missing, out=out) for a in argv]
    status, stdout, stderr = run(capsys, *args)
    assert_printable(stdout + stderr)
    if status == 1:  # verify reports a missing shard as its one problem line
        assert argv[0] == "verify" and stdout.count("\n") == 1 and stdout.count("\t") == 3
    else:
        assert status == 2, stderr
        assert stderr.count("\n") == 1 and stderr.startswith("Error: "), repr(stderr)


def test_log_lines_are_escaped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A warning naming something from the data goes through the CLI's formatter."""
    from shardkit.cli._toolargs import PrintableFormatter

    record = logging.LogRecord("shardkit.x", logging.WARNING, "f", 1, "skip %s", (HOSTILE,), None)
    line = PrintableFormatter("%(levelname)s %(name)s: %(message)s").format(record)
    assert_printable(line)
    assert "\n" not in line and line.startswith("WARNING shardkit.x: skip k\\x1b[2J")


def test_escape_controls_is_idempotent_and_keeps_printable_text() -> None:
    once = escape_controls(HOSTILE)
    assert escape_controls(once) == once
    assert escape_controls("naïve café 東京 a\u00a0b") == "naïve café 東京 a\u00a0b"
    assert escape_controls("a\tb\nc") == "a\\x09b\\x0ac"


# ---------------------------------------------------------------- bounded error messages


def test_error_message_and_fields_are_bounded() -> None:
    huge = "x" * 10_000_000
    error = StorageError(f"cannot open {huge!r}", url=huge, key=huge, offset=10**30)
    text = str(error)
    assert len(text) < MESSAGE_LIMIT + 2 * NAME_LIMIT + 100
    assert len(error.message) <= MESSAGE_LIMIT and "\u2026" in error.message
    assert error.url == huge and error.key == huge  # the fields stay whole for programs
    assert str(ShardkitError("short")) == "short"


def test_pickled_error_stays_bounded() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(ShardkitError("y" * 100_000, url="u")))
    assert len(str(error)) <= MESSAGE_LIMIT + 10 and str(error).startswith("u: yyy")


@pytest.mark.parametrize(
    "argv",
    [("cat", "{huge}.tar"), ("build", "{huge}", "{out}"), ("show", "{shard}", "-f", "{huge}")],
    ids=lambda argv: argv[0],
)
def test_a_huge_name_gives_a_bounded_error_line(
    capsys: pytest.CaptureFixture[str], hostile_dir: Path, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    huge = "n\x1b" * 2_000_000
    args = [
        a.format(huge=huge, out=str(tmp_path / "out"), shard=shard_of(hostile_dir)) for a in argv
    ]
    status, _, stderr = run(capsys, *args)
    assert status == 2
    assert stderr.startswith("Error: ") and stderr.count("\n") == 1
    assert len(stderr) < 4 * MESSAGE_LIMIT, len(stderr)
    assert_printable(stderr)


# ---------------------------------------------------------------- missing extras, all at once


def test_stats_plot_names_every_missing_extra_at_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, hostile_dir: Path
) -> None:
    import sys

    for module in ("matplotlib", "PIL", "PIL.Image"):
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    status, stdout, stderr = run(
        capsys, "stats", shard_of(hostile_dir), "--plot", str(hostile_dir / "p.png")
    )
    assert status == 2 and stdout == ""
    assert stderr == (
        "Error: stats --plot needs Pillow and matplotlib, which are not installed: "
        "pip install 'shardkit[images,plot]'\n"
    )
    assert not (hostile_dir / "p.png").exists()


def test_a_message_never_quotes_an_objects_address() -> None:
    """A library's message quoting a file object (soundfile: "Error opening <_io.BytesIO
    object at 0x7f...>") became a skip reason that differs in every run and process, so
    two builds of one folder listed their skipped files differently."""
    from shardkit.errors import DataError

    one = DataError("Error opening <_io.BytesIO object at 0x7f1df5334400>: bad")
    two = DataError("Error opening <_io.BytesIO object at 0x7fa83650c4c0>: bad")
    assert one.message == two.message == "Error opening <_io.BytesIO object>: bad"
    assert DataError("offset 0x10 at 0x20 is fine").message == "offset 0x10 at 0x20 is fine"


def test_an_unreadable_audio_field_gives_one_reason_in_every_process() -> None:
    import io

    import numpy as np
    import soundfile as sf

    from shardkit.codecs import check_field
    from shardkit.errors import DataError

    out = io.BytesIO()
    sf.write(out, np.zeros(4000, np.float32), 16000, format="FLAC", subtype="PCM_16")
    reasons = set()
    for _ in range(3):
        with pytest.raises(DataError) as info:
            check_field(out.getvalue()[:60], "flac")
        reasons.add(info.value.message)
    ((reason,),) = [reasons]
    assert reason.startswith("unreadable or truncated FLAC audio: ") and " at 0x" not in reason
    assert "object" not in reason, reason
