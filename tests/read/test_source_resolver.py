"""One shard-list resolver (:mod:`shardkit.pipeline._urls`): every entry point that takes a
source reads the shards it names, in its order, and ``build`` falls back to an image folder
only when it names none. The ``.idx`` files beside a pattern's shards count as a folder's."""

from __future__ import annotations

import ast
import contextlib
import gzip
import importlib
import inspect
import io
import os
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.pipeline import write_shards

import shardkit
import shardkit.tools
from shardkit import BuildOptions, storage
from shardkit.errors import BuildError, FormatError
from shardkit.pipeline import _urls as urls
from shardkit.pipeline import resolve_source
from shardkit.reader import read_shard
from shardkit.tools import write_indexes

COUNTS = [3, 4, 5]


def _keys(urls: Any) -> list[str]:
    return [s["__key__"] for url in urls for s in read_shard(url)]


def _folder_with_subfolder(tmp_path: Path) -> str:
    folder = str(tmp_path / "ds")
    write_shards(folder, COUNTS, manifest=False)
    os.mkdir(os.path.join(folder, "empty"))  # e.g. a leftover logs/ folder
    return folder


# --------------------------------------------------------------------------- R4


def test_a_shard_folder_with_an_empty_subfolder_is_shards_everywhere(tmp_path: Path) -> None:
    folder = _folder_with_subfolder(tmp_path)
    expected = _keys(resolve_source(folder).urls)
    assert len(expected) == sum(COUNTS)
    assert sorted(s["__key__"] for s in shardkit.Dataset(folder)) == sorted(expected)
    assert shardkit.tools.cat(folder, str(tmp_path / "cat.tar")) == sum(COUNTS)
    result = shardkit.build(folder, str(tmp_path / "out"), options=BuildOptions(workers=1))
    assert result.samples == sum(COUNTS)  # was: "an image folder" with no images


def test_a_manifest_path_is_a_source_for_every_entry_point(tmp_path: Path) -> None:
    folder = str(tmp_path / "ds")
    write_shards(folder, COUNTS)
    manifest = os.path.join(folder, "manifest.json")
    assert len(shardkit.Dataset(manifest)) == sum(COUNTS)
    assert not shardkit.tools.verify(manifest).problems
    result = shardkit.build(manifest, str(tmp_path / "out"), options=BuildOptions(workers=1))
    assert result.samples == sum(COUNTS)  # was: "not a source shardkit can build from"


def test_a_folder_of_neither_shards_nor_a_manifest_is_an_image_folder_to_build(
    tmp_path: Path,
) -> None:
    with pytest.raises(shardkit.errors.ConfigError, match="no shards"):
        resolve_source(str(tmp_path))
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "x.txt").write_text("not an image")
    with pytest.raises(BuildError, match="no image"):
        shardkit.build(str(tmp_path), str(tmp_path.parent / "out-img"))


# --------------------------------------------------------------------------- the contract


class _Resolved(BaseException):
    """The probe reached the resolver (a BaseException: no handler swallows it)."""


class _Expanded(BaseException):
    """The probe reached the URL expander without the resolver (read as a pattern)."""


class _Opened(BaseException):
    """The probe was opened as one shard or file, without the resolver."""


def _patch_everywhere(monkeypatch: pytest.MonkeyPatch, original: Any, stand_in: Any) -> None:
    """Replace ``original`` under every name a shardkit module binds it to."""
    for name, module in list(sys.modules.items()):
        if name == "shardkit" or name.startswith("shardkit."):
            for attr, value in list(vars(module).items()):
                if value is original:
                    monkeypatch.setattr(module, attr, stand_in)


def _filler(param: inspect.Parameter, tmp: Path) -> Any:
    """A value for a required parameter that is not the one probed (never reached: the
    probe stops the call first); ``inspect.Parameter.empty`` when there is none."""
    hint = str(param.annotation)
    if "Callable" in hint or hint.endswith("Fn"):
        return lambda *args, **kwargs: None
    if "TextIO" in hint:
        return io.StringIO()
    if hint == "int":
        return 1
    if "str" in hint:
        return str(tmp / "probe-out-%06d.tar")
    return inspect.Parameter.empty


def _probe(obj: Any, param: str, probe: str, tmp: Path) -> type[BaseException] | None:
    """Call ``obj`` with ``probe`` as ``param`` (and ask the length of what it returns and
    iterate it: a dataset resolves lazily); which marker it reached, if any."""
    kwargs: dict[str, Any] = {}
    for p in inspect.signature(obj).parameters.values():
        if p.name == param:
            kwargs[p.name] = probe
        elif p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            kwargs[p.name] = _filler(p, tmp)
            if kwargs[p.name] is inspect.Parameter.empty:
                return None
    try:
        result = obj(**kwargs)
        if hasattr(result, "__len__"):
            len(result)
        if hasattr(result, "__iter__") and not isinstance(result, (str, bytes)):
            next(iter(result), None)
    except (_Resolved, _Expanded, _Opened) as marker:
        return type(marker)
    except Exception:  # not a source parameter (or one this probe cannot reach)
        return None
    return None


def _import_every_module() -> None:
    """Import every shardkit module now, so that none binds a stand-in below at its first
    import (``from .urls import find_shards`` inside a module imported during the probe
    would keep the stand-in after monkeypatch restores the names it set)."""
    for found in pkgutil.walk_packages(shardkit.__path__, "shardkit."):
        if found.name.endswith("__main__"):
            continue
        with contextlib.suppress(ImportError):  # a module of an extra not installed
            importlib.import_module(found.name)


def _entry_points(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> dict[str, set[str]]:
    """Every public callable of ``shardkit`` and ``shardkit.tools``, found by what it does
    with each argument that may be a string, whatever its name: called with a folder in
    that place, does the folder reach the resolver (``"resolved"``), the URL expander
    without it (``"expanded"``: a second reading of sources), or is it opened as one shard
    (``"opened"``: a function of one shard URL)? Exception classes are left out."""
    probe = str(tmp / "probe-folder")
    os.mkdir(probe)

    def resolver(source: Any, *args: Any, **kwargs: Any) -> Any:
        if source == probe or (not isinstance(source, str) and probe in list(source)):
            raise _Resolved
        return original_parts(source, *args, **kwargs)

    def sink(original: Callable[..., Any], marker: type[BaseException]) -> Callable[..., Any]:
        def raw(url: Any, *args: Any, **kwargs: Any) -> Any:
            if url == probe or (isinstance(url, (list, tuple)) and probe in url):
                raise marker
            return original(url, *args, **kwargs)

        return raw

    _import_every_module()  # a module first imported under the patches would keep them
    original_parts = urls.resolve_parts
    original_find = urls.find_shards
    _patch_everywhere(monkeypatch, urls.resolve_parts, resolver)
    _patch_everywhere(monkeypatch, urls.find_shards, resolver)
    _patch_everywhere(monkeypatch, original_find, resolver)
    _patch_everywhere(monkeypatch, storage.expand_urls, sink(storage.expand_urls, _Expanded))
    for original in (storage.open_read, storage.open_regular):
        _patch_everywhere(monkeypatch, original, sink(original, _Opened))
    monkeypatch.chdir(tmp)
    found: dict[str, set[str]] = {"resolved": set(), "expanded": set(), "opened": set()}
    names = {_Resolved: "resolved", _Expanded: "expanded", _Opened: "opened"}
    for module in (shardkit, shardkit.tools):
        for name in module.__all__:
            obj = getattr(module, name)
            if not callable(obj) or (isinstance(obj, type) and issubclass(obj, BaseException)):
                continue
            for param in inspect.signature(obj).parameters.values():
                hint = str(param.annotation)
                if not any(word in hint for word in ("str", "Inputs", "Any", "PathLike")):
                    continue
                marker = _probe(obj, param.name, probe, tmp)
                if marker is not None:
                    found[names[marker]].add(name)
    return found


def _out_keys(path: str) -> list[str]:
    return _keys(resolve_source(path).urls)


def _tsv(source: str, tmp: Path) -> list[str]:
    out = io.StringIO()
    shardkit.tools.write_tsv(source, "__key__", out, header=False)
    return out.getvalue().split()


def _same(sample: dict[str, Any]) -> dict[str, Any]:
    return sample


def _map_shards(source: str, tmp: Path) -> list[str]:
    results = shardkit.map_shards(_same, source, str(tmp / "map-%06d.tar"), workers=1)
    return _keys(result.output for result in results)


def _proc(source: str, tmp: Path) -> list[str]:
    shardkit.tools.proc(source, "true", str(tmp / "proc-%06d.tar"), max_count=100)
    return _out_keys(str(tmp / "proc-{000000..000000}.tar"))


# How each entry point shows the samples (so the shards, in order) a source named to it.
OBSERVED: dict[str, Callable[[str, Path], list[str]]] = {
    "Dataset": lambda src, tmp: [s["__key__"] for s in shardkit.Dataset(src, shuffle_shards=False)],
    "IndexedDataset": lambda src, tmp: [
        s["__key__"]
        for s in (lambda ds: (ds[i] for i in range(len(ds))))(shardkit.IndexedDataset(src))
    ],
    "mix": lambda src, tmp: _keys(shardkit.mix([shardkit.Dataset(src)]).shards.urls),
    "build": lambda src, tmp: sorted(  # the build's order is its plan's: compare the set
        _out_keys(shardkit.build(src, str(tmp / "built"), options=BuildOptions(workers=1)).out)
    ),
    "resolve_inputs": lambda src, tmp: _keys(r.url for r in shardkit.tools.resolve_inputs([src])),
    "cat": lambda src, tmp: (
        shardkit.tools.cat(src, str(tmp / "c.tar")),
        _out_keys(str(tmp / "c.tar")),
    )[1],
    "iter_cat": lambda src, tmp: [s["__key__"] for s in shardkit.tools.iter_cat(src)],
    "convert": lambda src, tmp: (
        shardkit.tools.convert(src, str(tmp / "c.tfrecord")),
        _out_keys(str(tmp / "c.tfrecord")),
    )[1],
    "split": lambda src, tmp: [
        k
        for info in shardkit.tools.split(src, str(tmp / "s-%06d.tar"), max_count=100)
        for k in _out_keys(info.url)
    ],
    "stats": lambda src, tmp: _keys(s.url for s in shardkit.tools.stats(src).shards),
    "verify": lambda src, tmp: _keys(s.url for s in shardkit.tools.verify(src).shards),
    "write_tsv": _tsv,
    "proc": _proc,
    "map_shards": _map_shards,
}


# The public functions of one shard URL: they open it (a folder is an error there).
ONE_SHARD = {"build_index", "read_shard", "write_index"}


def test_every_entry_point_that_takes_a_source_is_in_the_contract(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    found = _entry_points(monkeypatch, tmp_path)
    assert not found["expanded"], f"these expand a source themselves: {found['expanded']}"
    assert found["opened"] == ONE_SHARD, "a function that opens its argument takes one shard"
    resolving = found["resolved"]
    assert {"Dataset", "IndexedDataset", "build", "cat", "verify", "map_shards"} <= resolving
    missing = resolving - set(OBSERVED)
    assert not missing, f"add these entry points to OBSERVED: {sorted(missing)}"
    # mix() takes Datasets, each resolved already; every other entry is found by its use
    assert set(OBSERVED) - resolving == {"mix"}


def test_only_the_resolver_picks_shards_out_of_a_folder_listing() -> None:
    """A module that lists a folder and keeps the names that look like shards is a second
    resolver: only pipeline/_urls.py may do both."""
    root = Path(shardkit.__file__).parent
    both = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = {
            n.attr if isinstance(n, ast.Attribute) else n.id
            for n in ast.walk(tree)
            if isinstance(n, (ast.Attribute, ast.Name))
        }
        if names & {"listdir", "scandir", "ls", "glob", "iterdir"} and "is_shard_name" in names:
            both.append(str(path.relative_to(root)))
    assert both == [os.path.join("pipeline", "_urls.py")]


def _sources(tmp_path: Path) -> dict[str, str]:
    plain = str(tmp_path / "plain")
    urls = write_shards(plain, COUNTS, manifest=False)
    os.mkdir(os.path.join(plain, "sub"))  # a subfolder, ignored
    os.mkdir(os.path.join(plain, "dir.tar"))  # a folder with a shard's name, ignored
    with open(os.path.join(plain, "notes.txt"), "w") as f:
        f.write("not a shard")
    write_indexes(urls)
    listed = str(tmp_path / "listed")
    urls = write_shards(listed, [2, 6, 1])  # with a manifest.json
    write_indexes(urls)
    return {
        "folder": plain,
        "folder with a manifest": listed,
        "manifest": os.path.join(listed, "manifest.json"),
        "pattern": os.path.join(plain, "shard-{000000..000002}.tar"),
    }


@pytest.mark.parametrize("entry", sorted(OBSERVED))
def test_every_entry_point_resolves_a_source_as_the_resolver_does(
    tmp_path: Path, entry: str
) -> None:
    for name, source in _sources(tmp_path).items():
        expected = _keys(resolve_source(source).urls)
        work = tmp_path / f"work-{name.replace(' ', '-')}"
        work.mkdir()
        seen = OBSERVED[entry](source, work)
        want = sorted(expected) if entry == "build" else expected
        assert seen == want, f"{entry} reads {name} {source!r} otherwise"


# --------------------------------------------------------------------------- R5


def _gzip_tfrecords(folder: Path) -> list[str]:
    """TFRecords gzipped under a plain ``.tfrecord`` name, as TensorFlow's GZIP option
    writes them."""
    urls = write_shards(str(folder), COUNTS, ext="tfrecord", manifest=False)
    for url in urls:
        with open(url, "rb") as f:
            data = f.read()
        with open(url, "wb") as f:
            f.write(gzip.compress(data))
    return urls


def test_an_index_of_gzipped_tfrecords_keeps_the_folder_readable(tmp_path: Path) -> None:
    folder = tmp_path / "gz"
    urls = _gzip_tfrecords(folder)
    write_indexes(urls)  # was: offsets of the inflated stream checked against the gzip size
    ds = shardkit.Dataset(str(folder), shuffle_shards=False)
    assert len(ds) == sum(COUNTS)
    assert [s["__key__"] for s in ds] == _keys(urls)
    with pytest.raises(FormatError, match="random access needs an uncompressed shard"):
        len(shardkit.IndexedDataset(str(folder)))
    with pytest.raises(BuildError, match="compressed shards cannot be re-sharded"):
        shardkit.build(str(folder), str(tmp_path / "out"), options=BuildOptions(workers=1))


# --------------------------------------------------------------------------- issue 21 item 4


def test_a_pattern_or_list_uses_the_index_files_beside_its_shards(tmp_path: Path) -> None:
    folder = str(tmp_path / "wds")
    urls = write_shards(folder, [6, 3, 4], manifest=False)  # what ShardWriter leaves
    write_indexes(urls)
    pattern = os.path.join(folder, "shard-{000000..000002}.tar")
    for source in (pattern, urls):
        assert len(shardkit.Dataset(source)) == 13  # was: TypeError, no length
        per_rank = [sum(1 for _ in shardkit.Dataset(source, node=(rank, 3))) for rank in range(3)]
        assert per_rank == [len(shardkit.Dataset(source, node=(0, 3)))] * 3  # was 6/3/4
        assert len(shardkit.Dataset(source)) == len(shardkit.Dataset(folder))


def test_only_the_url_grammar_says_what_is_a_url() -> None:
    """``storage.url_scheme`` is the one rule for "this names a URL" (``scheme://`` at the
    start): a module that looks for ``"://"`` itself is a second rule (the builder had 14,
    which took ``data/a://b`` for a URL). A cluster address is not a storage URL."""
    root = Path(shardkit.__file__).parent
    spelt = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if any(
            isinstance(node, ast.Constant) and node.value == "://"
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    assert spelt == [os.path.join("engines", "_connect.py")]


def test_a_path_holding_a_scheme_later_is_not_a_url() -> None:
    assert storage.url_scheme("S3://bucket/x.tar") == "s3"
    assert storage.url_scheme("file:///data/x.tar") == "file"
    assert storage.url_scheme("data/a://b.tar") == ""
    assert storage.url_scheme("pipe:cat x.tar") == ""
