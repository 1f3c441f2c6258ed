from __future__ import annotations

import io
import os
import sys

import pytest
from helpers.tools import read_all, samples, shardkit, tar_bytes, write_shards

from shardkit.cli import main
from shardkit.errors import ConfigError, EncodeError
from shardkit.tools import (
    contact_sheet,
    format_sample,
    iter_samples,
    proc,
    resolve_inputs,
    tsv_rows,
)
from shardkit.tools.proc import ProcError


def test_show_describes_each_field(tmp_path: object) -> None:
    [url] = write_shards(str(tmp_path), samples(2, images=True))
    first = next(iter_samples(resolve_inputs([url])))
    text = format_sample(first)
    lines = text.splitlines()
    assert lines[0].startswith("k/00000  (") and "@ 0)" in lines[0]
    by_name = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert by_name["txt"][0] == "text" and "'text 0'" in lines[1]
    assert by_name["cls"][:4] == ["int", "1", "B", "0"]
    assert by_name["json"][0] == "json" and '{"label":"cat","i":0}' in text
    assert by_name["jpg"][0] == "image" and "JPEG" in by_name["jpg"]
    only = format_sample(first, fields=["cls"]).splitlines()
    assert len(only) == 2


@pytest.mark.parametrize(("count", "columns", "rows"), [(7, 3, 3), (2, 5, 1), (8, 4, 2)])
def test_grid_png_size_matches_the_grid(
    tmp_path: object, count: int, columns: int, rows: int
) -> None:
    from PIL import Image

    [url] = write_shards(str(tmp_path), samples(9, images=True), per_shard=20)
    out = os.path.join(str(tmp_path), "g.png")
    sheet = contact_sheet(
        iter_samples(resolve_inputs([url])),
        out,
        count=count,
        columns=columns,
        tile=64,
        label="json.label",
    )
    expected_columns = min(columns, count)
    assert (sheet.columns, sheet.rows) == (expected_columns, rows)
    with Image.open(out) as img:
        assert img.format == "PNG"
        assert img.size == (expected_columns * 64, rows * 64)
        assert img.getextrema() != ((24, 24), (24, 24), (24, 24))  # something was drawn


def test_grid_without_images_is_an_error(tmp_path: object) -> None:
    [url] = write_shards(str(tmp_path), samples(3))
    with pytest.raises(ConfigError, match="no image"):
        contact_sheet(iter_samples(resolve_inputs([url])), os.path.join(str(tmp_path), "g.png"))


def test_tsv_rows_escape_and_json_paths() -> None:
    rows = list(
        tsv_rows(
            [
                {
                    "__key__": "a",
                    "txt": b"x\ty\nz",
                    "json": b'{"l":{"m":[1,{"n":"q"}]}}',
                    "b": b"\xff",
                }
            ],
            ["__key__", "txt", "json.l.m.1.n", "json.l.m", "b", "missing", "json.nope"],
        )
    )
    assert rows == [["a", "x\\ty\\nz", "q", '[1,{"n":"q"}]', "<1 bytes>", "", ""]]


def test_cli_tsv_and_show(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    urls = write_shards(str(tmp_path), samples(6), per_shard=3)
    assert main(["tsv", str(tmp_path), "-f", "__key__,cls", "-f", "json.label", "-c", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "__key__\tcls\tjson.label"
    assert lines[1:] == [f"k/{i:05d}\t{i % 3}\t{['cat', 'dog', 'fox'][i % 3]}" for i in range(4)]
    assert main(["show", urls[1], "-c", "1"]) == 0
    assert capsys.readouterr().out.startswith("k/00003")


UPPER_AND_RESIZE = (
    f'{sys.executable} -c "import os; from PIL import Image; '
    "t = open('sample.txt').read(); open('sample.upper.txt', 'w').write(t.upper()); "
    "Image.open('sample.jpg').resize((8, 8)).save('sample.small.png'); "
    "os.remove('sample.bin')\""
)


def test_proc_parallel_matches_sequential(tmp_path: object) -> None:
    folder = str(tmp_path)
    urls = write_shards(os.path.join(folder, "in"), samples(10, images=True), per_shard=4)
    seq = proc(urls, UPPER_AND_RESIZE, os.path.join(folder, "seq.tar"), workers=1)
    par = proc(urls, UPPER_AND_RESIZE, os.path.join(folder, "par-%02d.tar"), workers=2, max_count=6)
    assert seq.samples_out == par.samples_out == 10
    out_seq = read_all([os.path.join(folder, "seq.tar")])
    out_par = read_all([os.path.join(folder, f"par-0{i}.tar") for i in range(2)])
    assert out_seq == out_par
    first = out_seq[0]
    assert sorted(k for k in first if k != "__key__") == [
        "cls",
        "jpg",
        "json",
        "small.png",
        "txt",
        "upper.txt",
    ]
    assert first["upper.txt"] == b"TEXT 0"
    assert first["small.png"].startswith(b"\x89PNG")
    assert [s["__key__"] for s in out_seq] == [f"k/{i:05d}" for i in range(10)]


def test_proc_on_error_fail_and_skip(tmp_path: object) -> None:
    folder = str(tmp_path)
    urls = write_shards(folder, samples(6), per_shard=10)
    failing = 'test "$SHARDKIT_INDEX" != 3'
    with pytest.raises(ProcError, match="status 1") as info:
        proc(urls, failing, os.path.join(folder, "f.tar"), workers=2)
    assert info.value.key == "k/00003"
    assert not os.path.exists(os.path.join(folder, "f.tar"))
    result = proc(urls, failing, os.path.join(folder, "s.tar"), workers=2, on_error="skip")
    assert (result.samples_in, result.samples_out, result.skipped) == (6, 5, 1)
    assert "k/00003" not in [s["__key__"] for s in read_all([os.path.join(folder, "s.tar")])]


def test_proc_is_confined_to_its_folder_and_skips_symlinks(tmp_path: object) -> None:
    folder = str(tmp_path)
    secret = os.path.join(folder, "secret.txt")
    with open(secret, "w") as f:
        f.write("do not pack me")
    hostile = [{"__key__": "../../evil", "txt": "hi"}, {"__key__": "/abs/x", "txt": "ho"}]
    src = os.path.join(folder, "h.tar")
    with open(src, "wb") as f:
        f.write(raw_tar(hostile))
    command = (
        f"ln -s {secret} sample.link.txt; mkdir sub; echo x > sub/f.txt; "
        "echo $SHARDKIT_STEM > info.stem"
    )
    out = os.path.join(folder, "o.tfrecord")  # the tar writer would refuse such keys
    proc([src], command, out, names="key")
    got = read_all([out])
    assert [s["__key__"] for s in got] == ["../../evil", "/abs/x"]
    assert all("link.txt" not in s for s in got)
    assert [s["txt"] for s in got] == [b"hi", b"ho"]
    assert [s["stem"] for s in got] == [b"evil\n", b"x\n"]
    assert sorted(os.listdir(folder)) == ["h.tar", "o.tfrecord", "secret.txt"]
    with pytest.raises(EncodeError, match="relative path"):
        proc([src], "true", os.path.join(folder, "o.tar"))
    with pytest.raises(ProcError, match="two files give the field 'txt'"):
        proc([src], "echo > other.txt", os.path.join(folder, "o2.tfrecord"))


def raw_tar(data: list[dict[str, str]]) -> bytes:
    """Tar bytes with keys the writer would refuse (built with tarfile)."""
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for sample in data:
            for ext, value in sample.items():
                if ext == "__key__":
                    continue
                payload = value.encode()
                info = tarfile.TarInfo(f"{sample['__key__']}.{ext}")
                info.size = len(payload)
                archive.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def test_cli_proc_stdin_to_stdout_keeps_order(tmp_path: object) -> None:
    blob = tar_bytes(samples(4))
    done = shardkit(
        "proc", "-", "-p", "2", "-e", "rm sample.bin; echo noise", "-o", "-", input=blob
    )
    assert done.returncode == 0, done.stderr
    from shardkit.formats import tar

    got = list(tar.iter_samples(io.BytesIO(done.stdout)))
    assert [s["__key__"] for s in got] == [f"k/{i:05d}" for i in range(4)]
    assert all("bin" not in s for s in got)
    assert b"noise" in done.stderr
