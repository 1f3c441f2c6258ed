"""Hostile tar archives: traversal names, links, devices, enormous names.

The reader never touches the file system: it returns names as they are and sends
non-regular members to the handler. Code that turns names into paths goes through
:func:`shardkit.formats.tar.safe_member_path`, which these tests hold to its promise.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable

import pytest
from helpers.hostile import archive, header, member, pax, read_tar

from shardkit.errors import DataError, FormatError
from shardkit.formats import tar
from shardkit.handlers import ignore_and_continue


def _tarfile_archive(*infos: tuple[str, bytes, str]) -> bytes:
    kinds = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE}
    kinds |= {"hardlink": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE}
    kinds |= {"fifo": tarfile.FIFOTYPE}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, payload, kind in infos:
            info = tarfile.TarInfo(name)
            info.type = kinds[kind]
            if kind in ("symlink", "hardlink"):
                info.linkname = payload.decode()
                tf.addfile(info)
            else:
                info.size = len(payload)
                tf.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def _keeper(errors: list[Exception]) -> Callable[[Exception], bool]:
    def keep(exc: Exception) -> bool:
        errors.append(exc)
        return True

    return keep


def test_traversal_and_absolute_names_are_returned_as_they_are() -> None:
    data = _tarfile_archive(
        ("../../x.txt", b"up", "file"),
        ("/etc/passwd.txt", b"abs", "file"),
        ("a/./b.txt", b"dot", "file"),
    )
    keys = [s["__key__"] for s in read_tar(data)]
    assert keys == ["../../x", "/etc/passwd", "a/./b"]


def test_pax_paths_with_nul_and_dotdot_are_returned_as_they_are() -> None:
    data = archive(
        pax({"path": b"a\0b.txt"}),
        member(b"ignored.txt", b"1"),
        pax({"path": b"../../../root/.ssh/k.txt"}),
        member(b"ignored2.txt", b"2"),
    )
    keys = [s["__key__"] for s in read_tar(data)]
    assert keys == ["a\0b", "../../../root/.ssh/k"]
    for key in keys:
        with pytest.raises(FormatError, match="unsafe member name"):
            tar.safe_member_path(key)


@pytest.mark.parametrize(
    ("kind", "word"),
    [
        ("symlink", "symlink"),
        ("hardlink", "hard link"),
        ("chr", "char device"),
        ("blk", "block device"),
        ("fifo", "fifo"),
    ],
)
def test_links_and_devices_go_to_the_handler_and_are_never_read(kind: str, word: str) -> None:
    data = _tarfile_archive(
        ("k.txt", b"before", "file"),
        ("evil.txt", b"/etc/shadow" if "link" in kind else b"", kind),
        ("m.txt", b"after", "file"),
    )
    with pytest.raises(FormatError, match=word) as info:
        read_tar(data)
    assert "evil.txt" in str(info.value) and info.value.offset is not None
    errors: list[Exception] = []
    samples = read_tar(data, handler=_keeper(errors))
    assert [(s["__key__"], s["txt"]) for s in samples] == [("k", b"before"), ("m", b"after")]
    assert len(errors) == 1 and isinstance(errors[0], DataError)


def test_a_hard_link_named_like_a_sample_field_does_not_alias_its_target() -> None:
    data = _tarfile_archive(("k.txt", b"secret", "file"), ("j.txt", b"k.txt", "hardlink"))
    samples = read_tar(data, handler=ignore_and_continue)
    assert [s["__key__"] for s in samples] == ["k"]  # no sample j holding k's bytes


def test_enormous_names() -> None:
    big = b"d/" + b"n" * 200_000 + b".txt"
    samples = read_tar(archive(member(b"././@LongLink", big + b"\0", b"L"), member(b"x", b"ok")))
    assert samples[0]["__key__"] == big[:-4].decode()
    with pytest.raises(FormatError, match="limit for tar metadata"):
        read_tar(archive(member(b"././@LongLink", b"n" * (2 << 20), b"L")))
    with pytest.raises(FormatError, match="limit for tar metadata"):
        read_tar(archive(pax({"path": b"p" * (2 << 20)}), member(b"x.txt", b"")))
    # A ustar name that fills all 100 bytes has no NUL: it must not run into the mode field.
    full = b"a" * 96 + b".txt"
    assert read_tar(archive(member(full, b"1")))[0]["__key__"] == "a" * 96


# --------------------------------------------------------------------------- safe_member_path

SAFE = {
    "a/b.jpg": "a/b.jpg",
    "./a/b.jpg": "a/b.jpg",
    "a/./b.jpg": "a/b.jpg",
    "k.txt": "k.txt",
    "...x": "...x",
    "a..b/c": "a..b/c",
    "é/日本.txt": "é/日本.txt",
}
UNSAFE = {
    "../x": "'..'",
    "a/../../x": "'..'",
    "a/..": "'..'",
    "..": "'..'",
    "/etc/passwd": "absolute",
    "//server/share": "absolute",
    "a\0b": "NUL",
    "a//b": "empty component",
    "a/b/": "empty component",
    "": "empty",
    ".": "empty",
    "./": "empty",
}


@pytest.mark.parametrize("name", sorted(SAFE))
def test_safe_member_path_keeps_safe_names(name: str, tmp_path: os.PathLike[str]) -> None:
    assert tar.safe_member_path(name) == SAFE[name]
    root = str(tmp_path)
    assert tar.safe_member_path(name, root) == os.path.join(root, *SAFE[name].split("/"))


@pytest.mark.parametrize("name", sorted(UNSAFE))
def test_safe_member_path_refuses_unsafe_names(name: str) -> None:
    with pytest.raises(FormatError, match=UNSAFE[name]) as info:
        tar.safe_member_path(name)
    assert info.value.key == name
    assert isinstance(info.value, DataError)  # so handler= policies apply


def test_safe_member_path_refuses_a_path_through_a_symlink_out_of_root(
    tmp_path: os.PathLike[str],
) -> None:
    root = os.path.join(str(tmp_path), "root")
    outside = os.path.join(str(tmp_path), "outside")
    os.makedirs(os.path.join(root, "inner"))
    os.makedirs(outside)
    os.symlink(outside, os.path.join(root, "escape"))
    os.symlink(os.path.join(root, "inner"), os.path.join(root, "fine"))
    with pytest.raises(FormatError, match="symlink"):
        tar.safe_member_path("escape/x.txt", root)
    assert tar.safe_member_path("fine/x.txt", root) == os.path.join(root, "fine", "x.txt")
    with pytest.raises(TypeError):
        tar.safe_member_path(b"x.txt")  # type: ignore[arg-type]


def test_extracting_a_hostile_archive_through_the_helper_stays_in_its_folder(
    tmp_path: os.PathLike[str],
) -> None:
    base = str(tmp_path)
    root = os.path.join(base, "out")
    os.makedirs(root)
    data = _tarfile_archive(
        ("ok/a.txt", b"fine", "file"),
        ("../escape.txt", b"no", "file"),
        ("/tmp/abs.txt", b"no", "file"),
        ("link.txt", b"/etc/passwd", "symlink"),
        ("ok/b.txt", b"fine too", "file"),
    )
    written = []
    refused = []
    for sample in tar.iter_samples(io.BytesIO(data), handler=ignore_and_continue):
        try:
            path = tar.safe_member_path(f"{sample['__key__']}.txt", root)
        except FormatError as exc:
            refused.append(str(exc.key))
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(sample["txt"])
        written.append(os.path.relpath(path, root))
    assert sorted(written) == ["ok/a.txt", "ok/b.txt"]
    assert sorted(refused) == ["../escape.txt", "/tmp/abs.txt"]
    assert sorted(os.listdir(base)) == ["out"]  # nothing next to the folder


def test_header_name_bytes_that_are_not_utf8_survive() -> None:
    data = archive(header(b"caf\xe9.txt", 0))
    (sample,) = read_tar(data)
    assert sample["__key__"] == "caf\udce9"  # surrogateescape: the bytes round-trip
    assert sample["__key__"].encode("utf-8", "surrogateescape") == b"caf\xe9"
