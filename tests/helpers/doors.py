"""The hostile test layer's registries (tests/hostile/test_hostile_doors.py): every reader
and writer entry point, registered once, and every kind of hostile input, each applied
automatically to every entry point it concerns.

An entry point declares what it touches (``TOUCHES``: a source folder, its shards, their
``.idx`` files, a manifest, ``json`` fields, a list, an output folder); a kind declares what
it attacks and whether it must make the entry fail. The test runs each kind in a process of
its own (a fork of an idle interpreter that imported shardkit and torch once), every
concerned entry point in a fresh copy of a small dataset, under a time bound (a FIFO must not
hang it), a memory cap (``/dev/zero`` must not fill it) and, for the full disk, a file-size
limit; and it checks a file outside every folder is never touched.
A new entry point registers here once and inherits every kind.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# What an entry point may touch; what a kind attacks.
FOLDER = "folder"  # lists a source folder of shards (and reads its manifest when present)
SHARD = "shard"  # reads shard bytes
IDX = "idx"  # reads .idx files
MANIFEST = "manifest"  # reads a manifest.json named directly
JSON_FIELD = "json"  # parses samples' json fields
LIST = "list"  # reads a JSONL list of files
WRITES = "writes"  # writes files into an output folder (or beside its input)
STATE = "state"  # takes a resume state (load_state_dict)
TOKENIZER = "tokenizer"  # reads a tokenizer.json (a token build's --tokenizer)

OUTSIDE = b"outside every folder: never to be touched\n"
MEGATRON = "m_text_document.bin"
DEEP = b"[" * 200_000 + b"]" * 200_000
TIME_BOUND = 30.0  # seconds an entry point may take on any input


@dataclass(frozen=True)
class Case:
    """One copy of the small dataset an entry point runs on."""

    root: str

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def src(self) -> str:  # two tar shards (6 samples each) and their .idx files
        return self.path("src")

    @property
    def shard(self) -> str:
        return self.path("src", "shard-000000.tar")

    @property
    def manifest(self) -> str:  # a valid manifest of hard links to the same shards
        return self.path("m", "manifest.json")

    @property
    def list(self) -> str:  # a JSONL list of three images
        return self.path("list.jsonl")

    @property
    def megatron(self) -> str:  # the token case's Megatron pair: this .bin and its .idx
        return self.path("src", MEGATRON)

    @property
    def out(self) -> str:
        return self.path("out")

    @property
    def tokenizer(self) -> str:  # a word-level tokenizer.json
        return self.path("tok", "tokenizer.json")

    @property
    def texts(self) -> str:  # a JSONL of rows with a text column, for a token build
        return self.path("texts.jsonl")

    @property
    def state_recipe(self) -> str:  # which resume state a state kind hands the entry
        return self.path("state-recipe")


# --------------------------------------------------------------------------- entry points


def _cli(*argv: str) -> None:
    """Run the CLI in-process: a failure must be one ``Error:`` line (raised here as a
    ShardkitError); a traceback or any other output on failure fails the test."""
    from shardkit.cli import main
    from shardkit.errors import ShardkitError

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(list(argv))
    text = err.getvalue().strip()
    if status == 0:
        return
    errors = [line for line in text.splitlines() if line.startswith("Error: ")]
    if "Traceback" not in text and (status == 1 or (status == 2 and len(errors) == 1)):
        raise ShardkitError((errors or text.splitlines() or ["problems found"])[-1][:1000])
    raise AssertionError(f"exit {status}: {text[-3000:]}")


def _checked(report: Any) -> None:
    from shardkit.errors import FormatError

    if not report.ok:
        raise FormatError(f"{len(report.problems)} problems: {report.problems[0]}")


def _verify_shard(case: Case) -> None:
    from shardkit import tools
    from shardkit.errors import FormatError

    problems: list[Any] = []
    tools.verify_shard(tools.resolve_inputs([case.shard])[0], on_problem=problems.append)
    if problems:
        raise FormatError(f"{len(problems)} problems: {problems[0]}")


def _dataset(case: Case) -> None:
    import shardkit

    dataset = shardkit.Dataset(case.src)
    list(dataset)
    len(dataset)
    list(shardkit.Dataset(case.manifest))


def _decoded(case: Case) -> None:
    """A Dataset that decodes every kind of field: images, audio, video and the codecs'."""
    import shardkit

    list(shardkit.Dataset(case.src).decode("rgb8", shardkit.audio(), shardkit.video(frames=1)))


def _packed(case: Case) -> None:
    """Token shards packed, from their folder and from a manifest naming them."""
    import shardkit

    for source in (case.src, case.manifest):
        list(shardkit.Dataset(source, seed=0).pack(8))


def _samples(case: Case) -> list[dict[str, Any]]:
    from shardkit.tools import iter_cat

    return list(iter_cat([case.src]))


def _indexed(case: Case) -> list[Any]:
    from shardkit.tools import load_index, read_indexed_sample

    index = load_index(case.shard)
    assert index is not None
    return [read_indexed_sample(case.shard, index, i) for i in range(index.samples)]


def _copy(sample: dict[str, Any]) -> dict[str, Any]:
    return sample


def _resumed(make: Callable[[str], Any]) -> Callable[[Case], None]:
    """An entry that takes a resume state: with a state kind planted (``case.state_recipe``),
    a state saved three items in (from another dataset for a foreign one), tampered as the
    kind says, loaded into a fresh object, which is then read; on clean input a read."""

    def run(case: Case) -> None:
        recipe = None
        if os.path.exists(case.state_recipe):
            with open(case.state_recipe) as f:
                recipe = f.read()
        target = make(case.src)
        if recipe is not None:
            source = make(case.path("other") if recipe == "foreign" else case.src)
            items = iter(source)
            for _ in range(3):
                next(items)
            target.load_state_dict(_TAMPER[recipe](source.state_dict()))
        list(target)

    return run


def _each_stream(change: Callable[[dict[str, Any]], None]) -> Callable[[Any], Any]:
    def tamper(state: dict[str, Any]) -> Any:
        for stream in state.get("streams", [state]):
            change(stream)
        return state

    return tamper


def _two_for_one(state: dict[str, Any]) -> Any:
    if "streams" in state:
        state["streams"] = state["streams"] * 2
        return state
    return [state, dict(state)]


_TAMPER: dict[str, Callable[[Any], Any]] = {
    "foreign": lambda state: state,
    "repeated ranges": _each_stream(lambda s: s.update(space=[[0, 3], [0, 3], [0, 3]])),
    "done 'false'": _each_stream(lambda s: s.update(done="false")),
    "consumed past the epoch": _each_stream(lambda s: s.update(consumed=10**6)),
    "infinite consumed": _each_stream(lambda s: s.update(consumed=float("inf"))),
    "two states for one stream": _two_for_one,
}


def _entries() -> dict[str, tuple[frozenset[str], Callable[[Case], Any]]]:
    import shardkit
    from shardkit import tools

    f, s, i, m, j, w = FOLDER, SHARD, IDX, MANIFEST, JSON_FIELD, WRITES
    read = frozenset({f, s})  # a folder read through
    counted = read | {i}  # ... with the sample counts of its .idx files
    e: dict[str, tuple[frozenset[str], Callable[[Case], Any]]] = {
        # shardkit.tools
        "build_index": (frozenset({s}), lambda c: tools.build_index(c.shard)),
        "cat": (read | {w}, lambda c: tools.cat([c.src], c.path("out", "all.tar"))),
        "contact_sheet": (
            read | {w},
            lambda c: tools.contact_sheet(_samples(c), c.path("out", "sheet.png")),
        ),
        "convert": (
            read | {j, w},
            lambda c: tools.convert([c.src], c.path("out", "all.tfrecord")),
        ),
        "describe_field": (
            read | {j},
            lambda c: tools.describe_field("json", _samples(c)[0]["json"]),
        ),
        "describe_sample": (read | {j}, lambda c: tools.describe_sample(_samples(c)[0])),
        "field_value": (read | {j}, lambda c: tools.field_value(_samples(c)[0], "json.label")),
        "format_sample": (read | {j}, lambda c: tools.format_sample(_samples(c)[0])),
        "format_samples": (read | {j}, lambda c: list(tools.format_samples(_samples(c)))),
        "format_stats": (read, lambda c: tools.format_stats(tools.stats([c.src]))),
        "iter_cat": (read, _samples),
        "iter_samples": (read, lambda c: list(tools.iter_samples(tools.resolve_inputs([c.src])))),
        "load_index": (frozenset({i}), lambda c: tools.load_index(c.shard)),
        "proc": (read | {w}, lambda c: tools.proc([c.src], "cat", c.path("out", "p.tar"))),
        "read_indexed_sample": (frozenset({s, i}), _indexed),
        "read_manifest": (frozenset({m}), lambda c: tools.read_manifest(c.manifest)),
        "resolve_inputs": (frozenset({f}), lambda c: tools.resolve_inputs([c.src])),
        "run_on_sample": (read, lambda c: tools.run_on_sample(_samples(c)[0], "cat")),
        "run_on_samples": (read, lambda c: list(tools.run_on_samples(_samples(c), "cat"))),
        "shuffle_buffer": (read, lambda c: list(tools.shuffle_buffer(_samples(c), 4))),
        "split": (
            read | {w},
            lambda c: tools.split([c.src], c.path("out", "s-%06d.tar"), max_count=4),
        ),
        "stats": (read, lambda c: tools.stats([c.src])),
        "tsv_rows": (read | {j}, lambda c: list(tools.tsv_rows(_samples(c), ["json.label"]))),
        "verify": (counted | {m}, lambda c: _checked(tools.verify([c.src, c.manifest]))),
        "verify_shard": (
            frozenset({s, i}),
            _verify_shard,
        ),
        "write_index": (frozenset({s, w}), lambda c: tools.write_index(c.shard)),
        "write_indexes": (frozenset({s, w}), lambda c: tools.write_indexes([c.shard])),
        "write_shards": (
            read | {w},
            lambda c: tools.write_shards(_samples(c), c.path("out", "w-%06d.tar"), max_count=4),
        ),
        "write_tsv": (read | {j}, lambda c: tools.write_tsv([c.src], "json.label", io.StringIO())),
        # shardkit
        "Dataset": (counted | {m}, _dataset),
        "Dataset.decode": (read | {j}, _decoded),
        # token readers, on the token case (TOKEN_ENTRIES): pack refuses an image dataset
        "Dataset.pack": (counted | {m}, _packed),
        "Dataset.pack.load_state_dict": (
            frozenset({STATE}),
            _resumed(lambda src: shardkit.Dataset(src).pack(8)),
        ),
        "Dataset.pack (Megatron)": (
            frozenset({i, s}),
            lambda c: list(shardkit.Dataset(c.megatron, seed=0).pack(8)),
        ),
        "build (Megatron)": (frozenset({i, s, w}), lambda c: shardkit.build(c.megatron, c.out)),
        "IndexedDataset": (counted, lambda c: list(shardkit.IndexedDataset(c.src))),
        "mix": (
            read,
            lambda c: list(shardkit.mix([shardkit.Dataset(c.src), shardkit.Dataset(c.src)])),
        ),
        "Loader": (read, lambda c: list(shardkit.Loader(shardkit.Dataset(c.src), batch_size=None))),
        "Dataset.load_state_dict": (frozenset({STATE}), _resumed(shardkit.Dataset)),
        "mix.load_state_dict": (
            frozenset({STATE}),
            _resumed(lambda src: shardkit.mix([shardkit.Dataset(src), shardkit.Dataset(src)])),
        ),
        "Loader.load_state_dict": (
            frozenset({STATE}),
            _resumed(lambda src: shardkit.Loader(shardkit.Dataset(src), batch_size=None)),
        ),
        "build": (counted | {w}, lambda c: shardkit.build(c.src, c.out)),
        "build (tokenizer)": (
            frozenset({TOKENIZER, w}),
            lambda c: shardkit.build(
                c.texts, c.out, options=shardkit.BuildOptions(tokenizer=c.tokenizer, workers=1)
            ),
        ),
        "build_list": (
            frozenset({LIST, w}),
            lambda c: shardkit.build(c.list, c.path("out", "from-list")),
        ),
        "map_shards": (
            frozenset({s, w}),
            lambda c: shardkit.map_shards(
                _copy, c.shard, c.path("out", "mapped-%06d.tar"), workers=1
            ),
        ),
        "read_shard": (frozenset({s}), lambda c: list(shardkit.read_shard(c.shard))),
        "ShardWriter": (read | {w}, _shard_writer),
        "TarWriter": (read | {w}, _tar_writer),
        # the CLI
        "cli build": (counted | {w}, lambda c: _cli("build", c.src, c.out)),
        "cli build --tokenizer": (
            frozenset({TOKENIZER, w}),
            lambda c: _cli("build", c.texts, c.out, "--tokenizer", c.tokenizer, "--workers", "1"),
        ),
        "cli cat": (read | {w}, lambda c: _cli("cat", c.src, "-o", c.path("out", "c.tar"))),
        "cli convert": (
            read | {j, w},
            lambda c: _cli("convert", c.src, "-o", c.path("out", "c.tfrecord")),
        ),
        "cli demo": (
            frozenset({w}),
            lambda c: _cli("demo", c.path("out", "demo"), "--images", "4"),
        ),
        "cli index": (frozenset({f, s, w}), lambda c: _cli("index", c.src)),
        "cli proc": (
            read | {w},
            lambda c: _cli("proc", c.src, "-e", "cat", "-o", c.path("out", "p.tar")),
        ),
        "cli show": (read | {j}, lambda c: _cli("show", c.src)),
        "cli split": (
            read | {w},
            lambda c: _cli("split", c.src, "-o", c.path("out", "s-%06d.tar"), "--max-count", "4"),
        ),
        "cli stats": (read, lambda c: _cli("stats", c.src)),
        "cli tsv": (read | {j}, lambda c: _cli("tsv", c.src, "-f", "__key__,json.label")),
        "cli verify": (counted, lambda c: _cli("verify", c.src)),
        "cli view": (counted, _view),
        "class_names": (
            frozenset({f, m}),
            lambda c: tools.class_names(tools.resolve_inputs([c.manifest, c.src])),
        ),
    }
    return e


def _view(case: Case) -> None:
    """``shardkit view``: open the source, then ask for its first page and first sample
    over HTTP, as a browser would (the server's own errors are pages, not exceptions)."""
    import urllib.request

    from shardkit.tools.view import Viewer

    with Viewer(case.src, port=0) as viewer:
        viewer.start()
        for path in ("", "sample/0"):
            with urllib.request.urlopen(viewer.url + path, timeout=20) as answer:
                answer.read()


def _shard_writer(case: Case) -> None:
    import shardkit

    with shardkit.ShardWriter(case.path("out", "sw-%06d.tar"), max_count=4) as sink:
        for sample in _samples(case):
            sink.write(sample)


def _tar_writer(case: Case) -> None:
    import shardkit
    from shardkit import storage

    with (
        storage.open_atomic(case.path("out", "t.tar")) as file,
        shardkit.TarWriter(file.stream) as sink,
    ):
        for sample in _samples(case):
            sink.write(
                {k: v for k, v in sample.items() if not k.startswith("__") or k == "__key__"}
            )


# Public names that read or write nothing (pure functions of their arguments, or classes
# the registered entry points return): the coverage test accepts these, with the reason.
NOT_IO = {
    "index_url": "a name from a name",
    "parse_fields": "parses its argument",
    "plot_stats": "draws a Stats object (the entry 'format_stats' reads the shards)",
    "MixedDataset": "what 'mix' returns",
    "audio": "a decoder spec: .decode() applies it to bytes a reader already read",
    "image": "a decoder spec: .decode() applies it to bytes a reader already read",
    "video": "a decoder spec: .decode() applies it to bytes a reader already read",
}


#: Entries that run on the token case (token shards and a Megatron pair, ``make_case``'s
#: ``tokens=True``): the same kinds, planted at the same paths, in a dataset they accept.
TOKEN_ENTRIES = frozenset(
    {"Dataset.pack", "Dataset.pack.load_state_dict", "Dataset.pack (Megatron)", "build (Megatron)"}
)


def entry_names() -> list[str]:
    return sorted(_entries())


# --------------------------------------------------------------------------- kinds


def _fifo(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    os.mkfifo(path)


def _link(path: str, target: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    os.symlink(target, path)


def _put(path: str, data: bytes) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    with open(path, "wb") as f:
        f.write(data)


def _huge(path: str, size: int | None = None) -> None:
    """A sparse file (it costs nothing on disk) a byte over ``size`` (default: the limit
    of a document, a manifest or an index)."""
    from shardkit.formats.limits import MAX_DOCUMENT_SIZE

    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    with open(path, "wb") as f:
        f.truncate((MAX_DOCUMENT_SIZE if size is None else size) + 1)


def _huge_tokenizer(path: str) -> None:
    from shardkit.builder._tokens import _TOKENIZER_LIMIT

    _huge(path, _TOKENIZER_LIMIT)


def _idx(case: Case) -> list[str]:
    return [case.path("src", n) for n in sorted(os.listdir(case.src)) if n.endswith(".idx")]


def _manifests(case: Case) -> list[str]:
    return [case.path("src", "manifest.json"), case.manifest]


def _each(
    paths: Callable[[Case], list[str]], plant: Callable[[str], None]
) -> Callable[[Case], None]:
    def apply(case: Case) -> None:
        for path in paths(case):
            plant(path)

    return apply


def _truncate_shard(case: Case) -> None:
    for name in ("shard-000000.tar", "shard-000001.tar", MEGATRON):
        path = case.path("src", name)
        if os.path.exists(path):  # a Megatron .bin: the token case's
            os.truncate(path, os.path.getsize(path) // 2 + 100)  # cut since it was indexed


def _deep_json_field(case: Case) -> None:
    from shardkit.writer import ShardWriter

    os.makedirs(case.path("src2"))
    with ShardWriter(case.path("src2", "shard-%06d.tar"), max_count=6) as sink:
        for i in range(12):
            sink.write({"__key__": f"k{i:03d}", "json": DEEP, "cls": i % 3, "txt": "x"})
    shutil.rmtree(case.src)
    os.rename(case.path("src2"), case.src)
    for name in os.listdir(case.src):
        _index(case.path("src", name))


def _deep_list_row(case: Case) -> None:
    with open(case.list, "ab") as f:
        f.write(b'{"path": "images/0.jpg", "label": ' + DEEP + b"}\n")


def _state(recipe: str) -> Callable[[Case], None]:
    """A state kind: the entry makes the state and tampers with it (:func:`_resumed`); a
    foreign one comes from another dataset (one of the source's shards)."""

    def plant(case: Case) -> None:
        with open(case.state_recipe, "w") as f:
            f.write(recipe)
        os.makedirs(case.path("other"))
        for name in ("shard-000000.tar", "shard-000000.tar.idx"):
            if os.path.exists(case.path("src", name)):
                shutil.copy(case.path("src", name), case.path("other", name))

    return plant


def _link_out(case: Case) -> None:
    """Links to the outside file at every name a writer could be tricked by: the old
    predictable temporaries (``.NAME.tmp-PID``) of every output name, and the names of
    the files a build makes."""
    names = [
        "all.tar",
        "all.tfrecord",
        "sheet.png",
        "p.tar",
        "c.tar",
        "c.tfrecord",
        "t.tar",
        "manifest.json",
        *(f"{p}-{n:06d}.tar" for p in ("s", "w", "sw", "shard", "mapped") for n in range(4)),
    ]
    os.makedirs(case.out, exist_ok=True)
    for name in names:
        for suffix in (str(os.getpid()), "0" * 16):
            _link(case.path("out", f".{name}.tmp-{suffix}"), case.path("outside", "secret"))
    for name in (".shardkit-build.journal", ".shardkit-build.lock"):  # a build's own files
        _link(case.path("out", name), case.path("outside", "secret"))
    for name in os.listdir(case.src):
        for suffix in (str(os.getpid()), "0" * 16):
            _link(case.path("src", f".{name}.idx.tmp-{suffix}"), case.path("outside", "secret"))


def _giant_fields(case: Case) -> None:
    """The budget kind (issue 28): the second shard's samples hold fields whose headers
    declare giant sizes (2^40 pixels, 2^36 audio frames, an array of 2^40 bytes), each a
    few hundred bytes; every entry that decodes them must refuse them in one line, never
    allocate what they declare (the child's address space is capped at 8 GiB)."""
    import struct
    import zlib

    from shardkit.writer import ShardWriter

    side = 1 << 20
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr
    png += struct.pack(">I", zlib.crc32(b"IHDR" + ihdr)) + bytes(4) + b"IEND\xaeB`\x82"
    head = repr({"descr": "|u1", "fortran_order": False, "shape": (1 << 40,)}).encode()
    head += b" " * (-(len(head) + 11) % 64) + b"\n"
    npy = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head + bytes(16)
    fields = [("flac", _giant_flac()), ("npy", npy), ("png", png)]  # one per sample
    if os.path.exists(case.megatron):
        _giant_tokens(case)
        return
    os.unlink(case.path("src", "shard-000001.tar"))
    with ShardWriter(case.path("src", "shard-%06d.tar"), max_count=6, start_index=1) as sink:
        for i in range(6):
            ext, data = fields[i % 3]
            sink.write({"__key__": f"g{i:03d}", ext: data, "cls": i % 3})
    _index(case.path("src", "shard-000001.tar"))


def _giant_tokens(case: Case) -> None:
    """The budget kind on the token case: token groups whose lengths declare 2^32 - 1
    tokens each, and a Megatron .idx whose header counts 2^40 sequences."""
    import struct

    import numpy as np

    from shardkit.formats.megatron import MAGIC
    from shardkit.writer import ShardWriter

    lengths = np.full(4, 2**32 - 1, "<u4").tobytes()
    os.unlink(case.path("src", "shard-000001.tar"))
    with ShardWriter(case.path("src", "shard-%06d.tar"), max_count=6, start_index=1) as sink:
        for i in range(6):
            sink.write({"__key__": f"g{i:03d}", "tokens.u16": bytes(8), "lengths.u32": lengths})
    _index(case.path("src", "shard-000001.tar"))
    with open(case.megatron[: -len(".bin")] + ".idx", "wb") as f:
        f.write(MAGIC + struct.pack("<QBQQ", 1, 8, 1 << 40, 2) + bytes(64))


def _giant_flac() -> bytes:
    """A FLAC whose STREAMINFO claims 2^36 - 1 frames of 8 channels (2 TiB of float32)."""
    import numpy as np
    import soundfile as sf

    buffer = io.BytesIO()
    sf.write(buffer, np.zeros((4096, 8), np.float32), 16000, format="FLAC")
    data = bytearray(buffer.getvalue())
    field = int.from_bytes(data[18:26], "big") | ((1 << 36) - 1)
    data[18:26] = field.to_bytes(8, "big")
    return bytes(data[:300])


@dataclass(frozen=True)
class Kind:
    attacks: str
    plant: Callable[[Case], None]
    must_fail: bool
    full_disk: bool = False


_SPOILED: dict[str, Callable[[str], None]] = {
    "fifo": _fifo,
    "dev-zero": lambda path: _link(path, "/dev/zero"),
    "huge": _huge,
    "deep": lambda path: _put(path, DEEP),
    "truncated": lambda path: _put(path, b'{"shards": [{"name": "shard-0'),
}
KINDS: dict[str, Kind] = {"clean": Kind("", lambda case: None, False)}
for _target, _tag, _paths in (
    ("idx", IDX, _idx),
    ("manifest", MANIFEST, _manifests),
    ("tokenizer", TOKENIZER, lambda case: [case.tokenizer]),
):
    for _spoil, _plant in _SPOILED.items():
        if _tag == TOKENIZER and _spoil == "huge":
            _plant = _huge_tokenizer  # over the tokenizer's own limit (1 GiB)
        KINDS[f"{_spoil} {_target}"] = Kind(_tag, _each(_paths, _plant), True)
KINDS |= {
    "fifo among the shards": Kind(
        FOLDER, lambda c: _fifo(c.path("src", "shard-000002.tar")), False
    ),
    "truncated shard": Kind(SHARD, _truncate_shard, True),
    "deep json field": Kind(JSON_FIELD, _deep_json_field, False),
    "deep list row": Kind(LIST, _deep_list_row, True),
    "links out of the folder": Kind(WRITES, _link_out, False),
    "budget": Kind(SHARD, _giant_fields, False),
    "full disk": Kind(WRITES, lambda case: None, True, full_disk=True),
}
KINDS |= {  # foreign state: another dataset's, or tampered; every state-taking entry refuses it
    ("foreign state" if recipe == "foreign" else f"state: {recipe}"): Kind(
        STATE, _state(recipe), True
    )
    for recipe in _TAMPER
}
# A manifest kind reaches a folder too: it is planted in the source folder.
_ALSO = {MANIFEST: {FOLDER}}


def must_fail(kind: Kind, touches: frozenset[str]) -> bool:
    """Whether the entry reads what the kind spoils directly (a manifest planted in a
    folder may be passed over by a tool that lists only regular files: not an error)."""
    return kind.must_fail and kind.attacks in touches


def applies(kind: Kind, touches: frozenset[str]) -> bool:
    if not kind.attacks:
        return True
    return bool(touches & ({kind.attacks} | _ALSO.get(kind.attacks, set())))


# --------------------------------------------------------------------------- the case


def _index(path: str) -> None:
    """Index a shard as `shardkit index` does (ShardWriter wrote its .idx already)."""
    from shardkit.tools import write_index

    if path.endswith(".tar"):
        write_index(path)


def _token_samples() -> list[dict[str, Any]]:
    """12 token groups (3 documents of 1 to 9 tokens each)."""
    from shardkit.formats.tokens import encode_group

    samples = []
    for i in range(12):
        documents = [[(i * 7 + j * 3 + t) % 500 for t in range(1 + (i + j) % 9)] for j in range(3)]
        samples.append({"__key__": f"t{i:03d}", **dict(encode_group(documents, "tokens.u16"))})
    return samples


def _write_megatron(path: str, documents: list[list[int]]) -> None:
    """A Megatron pair as Megatron-LM writes it (one sequence per document, uint16)."""
    import struct

    import numpy as np

    from shardkit.formats.megatron import MAGIC

    sizes = np.array([len(d) for d in documents], "<i4")
    pointers = np.concatenate(([0], np.cumsum(sizes[:-1], dtype=np.int64) * 2)).astype("<i8")
    bounds = np.arange(len(documents) + 1, dtype="<i8")
    with open(path[: -len(".bin")] + ".idx", "wb") as f:
        f.write(MAGIC + struct.pack("<QBQQ", 1, 8, len(sizes), len(bounds)))
        f.write(sizes.tobytes() + pointers.tobytes() + bounds.tobytes())
    with open(path, "wb") as f:
        f.write(np.array([t for d in documents for t in d], "<u2").tobytes())


def make_case(root: str, *, tokens: bool = False) -> Case:
    """The small dataset every entry point runs on (made once per kind, then copied):
    images; with ``tokens``, the same layout holding token shards and a Megatron pair."""
    import random

    from shardkit.demo import make_jpeg
    from shardkit.writer import ShardWriter

    case = Case(root)
    rng = random.Random(0)
    os.makedirs(case.src)
    with ShardWriter(case.path("src", "shard-%06d.tar"), max_count=6) as sink:
        if tokens:
            for sample in _token_samples():
                sink.write(sample)
        for i in range(0 if tokens else 12):
            sink.write(
                {
                    "__key__": f"k{i:03d}",
                    "jpg": make_jpeg(rng, i % 3, min_side=16, max_side=24),
                    "json": {"label": i % 3},
                    "cls": i % 3,
                    "txt": f"text {i}",
                }
            )
    if tokens:
        _write_megatron(
            case.megatron, [[(d * 5 + t) % 700 for t in range(1 + d % 11)] for d in range(40)]
        )
    for name in sorted(os.listdir(case.src)):
        _index(case.path("src", name))
    os.makedirs(case.path("m"))
    shards = []
    for name in sorted(os.listdir(case.src)):
        if name.startswith(MEGATRON[: -len(".bin")]):
            continue  # the Megatron pair is named directly
        os.link(case.path("src", name), case.path("m", name))
        if name.endswith(".tar"):
            shards.append({"name": name, "samples": 6})
    with open(case.manifest, "w") as f:
        json.dump({"shards": shards}, f)
    os.makedirs(case.path("images"))
    rows = []
    for i in range(3):
        with open(case.path("images", f"{i}.jpg"), "wb") as f:
            f.write(make_jpeg(rng, i, min_side=16, max_side=24))
        rows.append(json.dumps({"path": f"images/{i}.jpg", "label": i}))
    with open(case.list, "w") as f:
        f.write("\n".join(rows) + "\n")
    _write_tokenizer(case)
    os.makedirs(case.path("outside"))
    with open(case.path("outside", "secret"), "wb") as f:
        f.write(OUTSIDE)
    return case


def _write_tokenizer(case: Case) -> None:
    """A word-level tokenizer (no training) and six rows of text for a token build."""
    import tokenizers

    words = ["alpha", "beta", "gamma", "delta"]
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    os.makedirs(os.path.dirname(case.tokenizer))
    tok.save(case.tokenizer)
    with open(case.texts, "w") as f:
        for i in range(6):
            f.write(json.dumps({"text": " ".join(words[(i + j) % 4] for j in range(i + 1))}))
            f.write("\n")


# --------------------------------------------------------------------------- the child


class _TimeBound(BaseException):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _TimeBound


def run_kind(kind_name: str, root: str, only: str | None = None) -> None:
    """In a fresh interpreter: every entry point the kind concerns, each on a fresh copy of
    the case with the kind planted; one JSON line per entry point on stdout."""
    from shardkit.errors import ShardkitError

    kind = KINDS[kind_name]
    templates: dict[bool, Case] = {}
    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, hard))
    for name, (touches, run) in sorted(_entries().items()):
        if (only is not None and name != only) or not applies(kind, touches):
            continue
        tokens = name in TOKEN_ENTRIES
        if tokens not in templates:
            where = os.path.join(root, "template-tokens" if tokens else "template")
            templates[tokens] = make_case(where, tokens=tokens)
        case = Case(os.path.join(root, name.replace(" ", "_")))
        shutil.copytree(templates[tokens].root, case.root, symlinks=True)
        kind.plant(case)
        print(json.dumps({"entry": name, "started": True}), flush=True)
        result: dict[str, Any] = {"entry": name, "must_fail": must_fail(kind, touches)}
        fsize = resource.getrlimit(resource.RLIMIT_FSIZE)
        start = time.monotonic()
        signal.alarm(int(TIME_BOUND))
        try:
            if kind.full_disk:
                resource.setrlimit(resource.RLIMIT_FSIZE, (64, fsize[1]))
            run(case)
            result["outcome"] = "ok"
        except ShardkitError as exc:
            result.update(outcome="error", type=type(exc).__name__, message=str(exc))
        except _TimeBound:
            result.update(outcome="hang", message=f"over {TIME_BOUND} s")
        except BaseException as exc:
            result.update(
                outcome="crash",
                type=type(exc).__name__,
                message=traceback.format_exc()[-3000:],
            )
        finally:
            signal.alarm(0)
            resource.setrlimit(resource.RLIMIT_FSIZE, fsize)
        result["seconds"] = round(time.monotonic() - start, 2)
        with open(case.path("outside", "secret"), "rb") as f:
            result["outside_intact"] = f.read() == OUTSIDE and not os.path.islink(
                case.path("outside", "secret")
            )
        print(json.dumps(result), flush=True)
        shutil.rmtree(case.root, ignore_errors=True)


# Imported once by the zygote, before it forks a child per kind: what the entry points
# import on first use (torch alone costs ~2.5 s of CPU per fresh interpreter).
PRELOAD = (
    "PIL.Image",
    "numpy",
    "torch",
    "torch.utils.data",
    "shardkit",
    "shardkit.cli",
    "shardkit.demo",
    "shardkit.tools",
    "shardkit.tools.view",
    "shardkit.writer",
)


def serve_kinds() -> None:
    """The zygote: import :data:`PRELOAD`, then for each request on stdin (a JSON line:
    kind, root) fork a child that runs :func:`run_kind` with its stdout and stderr in
    files beside ``root``. Each kind thus still runs in a process of its own (its own
    limits, signal handlers, module state: a fork of this idle interpreter, which runs
    nothing itself); only the imports are shared. Answers ``{"pid": N}`` once forked,
    then ``{"status": exit code}``."""
    import importlib
    import traceback

    for name in PRELOAD:
        importlib.import_module(name)
    for line in sys.stdin:
        request = json.loads(line)
        root = request["root"]
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                for fd, suffix in ((1, ".stdout"), (2, ".stderr")):
                    out = os.open(root + suffix, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.dup2(out, fd)
                run_kind(request["kind"], root)
                status = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        print(json.dumps({"pid": pid}), flush=True)
        _, waited = os.waitpid(pid, 0)
        print(json.dumps({"status": os.waitstatus_to_exitcode(waited)}), flush=True)


class Zygote:
    """A fresh interpreter running :func:`serve_kinds`, started on first use; :meth:`run`
    is :func:`run_kind` in a child of it. A run cut short (pytest-timeout, Ctrl-C) kills
    the child and the zygote: the next run starts a new one, never reading old answers."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._pending = b""

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
            code = (
                f"import sys; sys.path.insert(0, {here!r})\n"
                "from helpers.doors import serve_kinds\n"
                "serve_kinds()\n"
            )
            self._proc = subprocess.Popen(
                [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            self._pending = b""
        return self._proc

    def _answer(self, proc: subprocess.Popen[bytes], timeout: float | None = None) -> Any:
        """The zygote's next answer line, or None after ``timeout`` seconds without one."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"the zygote died ({proc.wait()})")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def run(self, kind_name: str, root: str, timeout: float) -> tuple[str, str, int]:
        """The child's stdout, stderr and exit status (-9 when killed at ``timeout``)."""
        proc = self._start()
        assert proc.stdin is not None
        child = None
        try:
            proc.stdin.write(json.dumps({"kind": kind_name, "root": root}).encode() + b"\n")
            proc.stdin.flush()
            child = self._answer(proc)["pid"]
            answer = self._answer(proc, timeout)
            if answer is None:
                os.kill(child, signal.SIGKILL)
                answer = self._answer(proc)
        except BaseException:
            if child is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            self.close(signal.SIGKILL)
            raise
        with open(root + ".stdout") as out, open(root + ".stderr") as err:
            return out.read(), err.read(), int(answer["status"])

    def close(self, sig: int | None = None) -> None:
        """End the zygote: by closing its requests, or by ``sig``."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None and proc.stdout is not None
        if sig is not None:
            proc.send_signal(sig)
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        proc.wait(30)
        proc.stdout.close()


def run_child(zygote: Zygote, kind_name: str, root: str, *, timeout: float) -> list[dict[str, Any]]:
    """Run :func:`run_kind` in a fresh process (a child of ``zygote``); its results (a
    child killed at ``timeout`` reports the entry it was in as a hang)."""
    stdout, stderr, status = zygote.run(kind_name, root, timeout)
    if status == -signal.SIGKILL:
        stderr = "killed at the time bound"
    results: list[dict[str, Any]] = []
    for line in stdout.splitlines():
        record = json.loads(line)
        if record.get("started"):
            results.append({"entry": record["entry"], "outcome": "hang", "message": stderr[-2000:]})
        else:
            results[-1] = record
    if status != 0 and not (results and results[-1]["outcome"] == "hang"):
        raise AssertionError(f"the child failed ({status}): {stderr[-3000:]}")
    return results
