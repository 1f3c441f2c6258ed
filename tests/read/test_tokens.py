"""Token streams: build with a tokenizer, read packed items exactly once (issue 30).

A small BPE tokenizer is trained offline; a few thousand documents of mixed lengths are
built into token shards and read back with ``pack``: the documents rebuilt from
``input_ids`` split where ``position_ids`` is 0 are exactly the tokenized documents, on
one rank and over three; resume is item for item; a 3:1 mix holds 75%; a Megatron pair
gives the same documents.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardkit
from shardkit.errors import ConfigError, FormatError, StateError
from shardkit.formats.megatron import MAGIC

tokenizers = pytest.importorskip("tokenizers")

WORDS = ["alpha", "beta", "gamma", "delta", "shard", "token", "pack", "epoch", "rank", "seed"]


def _texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    lengths = np.concatenate([rng.integers(1, 20, n // 2), rng.integers(100, 900, n - n // 2)])
    rng.shuffle(lengths)
    return [" ".join(rng.choice(WORDS, int(k))) for k in lengths]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("tokens")
    texts = _texts(2500, 0)
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=200, special_tokens=["[UNK]"])
    tok.train_from_iterator(texts, trainer)
    tok.save(str(root / "tokenizer.json"))
    with open(root / "docs.jsonl", "w") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"text": text}) + "\n")
            if i == 10:
                f.write(json.dumps({"text": ""}) + "\n")
                f.write(json.dumps({"text": 7}) + "\n")
    expected = [
        tokenizers.Tokenizer.from_file(str(root / "tokenizer.json")).encode(t).ids for t in texts
    ]
    options = shardkit.BuildOptions(
        tokenizer=str(root / "tokenizer.json"), max_count=800, workers=1
    )
    result = shardkit.build(str(root / "docs.jsonl"), str(root / "out"), options=options)
    return {"root": root, "out": str(root / "out"), "expected": expected, "result": result}


def _documents(items: list[dict[str, Any]]) -> list[tuple[int, ...]]:
    ids = np.concatenate([i["input_ids"] for i in items])
    pos = np.concatenate([i["position_ids"] for i in items])
    return [tuple(d.tolist()) for d in np.split(ids, np.flatnonzero(pos == 0)[1:])]


def _sorted(docs: list[Any]) -> list[tuple[int, ...]]:
    return sorted(tuple(d) for d in docs)


def test_build_writes_compact_token_shards(corpus: dict[str, Any]) -> None:
    out = corpus["out"]
    manifest = json.loads(Path(out, "manifest.json").read_text())
    tokens = sum(len(d) for d in corpus["expected"])
    assert manifest["tokens"] == tokens
    assert manifest["documents"] == len(corpus["expected"])
    assert [s["name"] for s in manifest["shards"]] == [f"shard-00000{i}.tar" for i in range(4)]
    reasons = sorted(reason for _, reason in corpus["result"].skipped)
    assert reasons == ["empty text", "text is not a string (int)"]
    size = sum(os.path.getsize(Path(out, s["name"])) for s in manifest["shards"])
    assert size <= 1.10 * 2 * tokens  # uint16: the vocabulary fits
    sample = next(iter(shardkit.Dataset(out)))  # an ordinary shard: many documents a sample
    assert set(sample) >= {"__key__", "tokens.u16", "lengths.u32"}
    assert len(sample["lengths.u32"]) // 4 == 800


def test_same_bytes_whatever_the_workers(corpus: dict[str, Any], tmp_path: Path) -> None:
    root = corpus["root"]
    options = shardkit.BuildOptions(tokenizer=str(root), max_count=800, workers=2)  # a folder
    shardkit.build(str(root / "docs.jsonl"), str(tmp_path / "two"), options=options)
    for name in ("shard-000000.tar", "shard-000003.tar"):
        assert (tmp_path / "two" / name).read_bytes() == Path(corpus["out"], name).read_bytes()


def test_packed_items_hold_every_document_once(corpus: dict[str, Any]) -> None:
    ds = shardkit.Dataset(corpus["out"], seed=0).pack(512)
    items = list(ds)
    assert len(items) == len(ds) == -(-sum(map(len, corpus["expected"])) // 512)
    assert all(len(i["input_ids"]) == 512 for i in items[:-1])
    assert _sorted(_documents(items)) == _sorted(corpus["expected"])
    again = list(shardkit.Dataset(corpus["out"], seed=0).pack(512))
    assert all(
        np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(items, again, strict=True)
    )
    other = shardkit.Dataset(corpus["out"], seed=0).pack(512)
    other.set_epoch(1)
    assert not np.array_equal(next(iter(other))["input_ids"], items[0]["input_ids"])


def test_three_ranks_share_the_documents(corpus: dict[str, Any]) -> None:
    ranks = [list(shardkit.Dataset(corpus["out"], seed=3, node=(r, 3)).pack(333)) for r in range(3)]
    counts = [len(r) for r in ranks]
    assert max(counts) - min(counts) <= 1
    for r, items in enumerate(ranks):  # only the very last item of the epoch is short
        short = [len(i["input_ids"]) < 333 for i in items]
        assert not any(short[:-1]) and (not short[-1] or r == 2)
    whole = [item for items in ranks for item in items]  # rank slices are contiguous
    assert _sorted(_documents(whole)) == _sorted(corpus["expected"])
    drop = [
        list(shardkit.Dataset(corpus["out"], node=(r, 3)).pack(333, drop_last=True))
        for r in range(3)
    ]
    assert sum(map(len, drop)) == sum(counts) - 1


def test_resume_item_for_item(corpus: dict[str, Any]) -> None:
    ds = shardkit.Dataset(corpus["out"], seed=1).pack(256)
    full = list(ds)
    run = shardkit.Dataset(corpus["out"], seed=1).pack(256)
    it = iter(run)
    head = [next(it) for _ in range(37)]
    state = run.state_dict()
    resumed = shardkit.Dataset(corpus["out"], seed=1).pack(256)
    resumed.load_state_dict(state)
    tail = list(resumed)
    assert len(head) + len(tail) == len(full)
    for a, b in zip(head + tail, full, strict=True):
        assert np.array_equal(a["input_ids"], b["input_ids"])
        assert np.array_equal(a["position_ids"], b["position_ids"])
    wrong = shardkit.Dataset(corpus["out"], seed=1).pack(128)
    with pytest.raises(StateError):
        wrong.load_state_dict(state)
        next(iter(wrong))


def test_elastic_resume_keeps_every_token_once(corpus: dict[str, Any]) -> None:
    def make(rank: int, world: int) -> shardkit.Dataset:
        return shardkit.Dataset(corpus["out"], seed=2, node=(rank, world)).pack(300)

    seen: list[dict[str, Any]] = []
    states = []
    for rank in range(2):
        ds = make(rank, 2)
        it = iter(ds)
        seen += [next(it) for _ in range(5 + 3 * rank)]
        states.append(ds.state_dict())
    for rank in range(3):
        ds = make(rank, 3)
        ds.load_state_dict(states)
        seen += list(ds)
    full = list(make(0, 1))
    key = lambda i: (i["input_ids"].tobytes(), i["position_ids"].tobytes())  # noqa: E731
    assert sorted(map(key, seen)) == sorted(map(key, full))


def test_mix_three_to_one(corpus: dict[str, Any], tmp_path: Path) -> None:
    prefix = str(tmp_path / "other_text_document")
    _write_megatron(prefix, [np.array(d, dtype=np.uint16) + 1000 for d in corpus["expected"]])
    a = shardkit.Dataset(corpus["out"], seed=0).pack(128)
    b = shardkit.Dataset(prefix + ".bin", seed=0).pack(128)
    mixed = list(shardkit.mix([a, b], weights=[3, 1], seed=0))
    share = sum(int(i["input_ids"].max()) < 1000 for i in mixed) / len(mixed)
    assert abs(share - 0.75) <= 0.04


def _write_megatron(prefix: str, docs: list[np.ndarray[Any, Any]], code: int = 8) -> None:
    """A Megatron indexed dataset as its documented format has it (one sequence a doc)."""
    Path(prefix + ".bin").write_bytes(b"".join(d.tobytes() for d in docs))
    sizes = np.array([len(d) for d in docs], dtype="<i4")
    itemsize = docs[0].dtype.itemsize if docs else 2
    pointers = np.concatenate(([0], np.cumsum(sizes[:-1], dtype=np.int64) * itemsize))
    head = MAGIC + struct.pack("<QBQQ", 1, code, len(docs), len(docs) + 1)
    body = sizes.tobytes() + pointers.astype("<i8").tobytes()
    Path(prefix + ".idx").write_bytes(head + body + np.arange(len(docs) + 1, dtype="<i8").tobytes())


def test_megatron_pair_gives_the_same_documents(corpus: dict[str, Any], tmp_path: Path) -> None:
    prefix = str(tmp_path / "name_text_document")
    _write_megatron(prefix, [np.array(d, dtype=np.uint16) for d in corpus["expected"]])
    items = list(shardkit.Dataset(prefix + ".bin", seed=0).pack(1000))
    assert _sorted(_documents(items)) == _sorted(corpus["expected"])
    out = tmp_path / "resharded"
    shardkit.build(prefix + ".bin", str(out), options=shardkit.BuildOptions(workers=1))
    again = list(shardkit.Dataset(str(out), seed=0).pack(1000))
    assert _sorted(_documents(again)) == _sorted(corpus["expected"])


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda idx: b"NOTMEGA" + idx[7:], "MMIDIDX"),
        (lambda idx: idx[:9] + struct.pack("<Q", 2) + idx[17:], "version 2"),
        (lambda idx: idx[:17] + b"\x06" + idx[18:], "dtype code 6"),
        (lambda idx: idx[:18] + struct.pack("<Q", 1 << 60) + idx[26:], "sequences"),
        (lambda idx: idx[:-8] + struct.pack("<q", 99), "document boundaries"),
        (lambda idx: idx[:34] + struct.pack("<i", -1) + idx[38:], "negative"),
    ],
)
def test_megatron_index_checked_whole(tmp_path: Path, damage: Any, message: str) -> None:
    prefix = str(tmp_path / "bad")
    _write_megatron(prefix, [np.arange(5, dtype=np.uint16), np.arange(3, dtype=np.uint16)])
    idx = Path(prefix + ".idx")
    idx.write_bytes(damage(idx.read_bytes()))
    with pytest.raises(FormatError, match=message):
        shardkit.Dataset(prefix + ".bin").pack(4)


def test_megatron_bin_too_short(tmp_path: Path) -> None:
    prefix = str(tmp_path / "short")
    _write_megatron(prefix, [np.arange(50, dtype=np.uint16)])
    Path(prefix + ".bin").write_bytes(b"\0" * 10)
    with pytest.raises(FormatError, match="needs 100 bytes"):
        shardkit.Dataset(prefix + ".bin").pack(4)


def test_megatron_bin_read_without_pack_is_one_line(tmp_path: Path) -> None:
    prefix = str(tmp_path / "name_text_document")
    _write_megatron(prefix, [np.arange(50, dtype=np.uint16)])
    for read in (list, len, lambda d: list(shardkit.Loader(d, batch_size=None))):
        with pytest.raises(ConfigError, match=r"name_text_document\.bin: .*\.pack\(seq_len\)"):
            read(shardkit.Dataset(prefix + ".bin"))
    assert len(list(shardkit.Dataset(prefix + ".bin").pack(8))) == 7


def test_token_member_checked(tmp_path: Path) -> None:
    from shardkit.formats.tokens import decode_group

    with pytest.raises(FormatError, match="add up to 5 tokens"):
        decode_group({"__key__": "k", "tokens.u16": b"\0" * 8, "lengths.u32": struct.pack("<I", 5)})
    with pytest.raises(FormatError, match="whole 2-byte items"):
        decode_group({"__key__": "k", "tokens.u16": b"\0" * 3, "lengths.u32": b""})
    with pytest.raises(FormatError, match="not a token sample"):
        decode_group({"__key__": "k", "jpg": b""})


def test_bad_tokenizer_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from shardkit.cli import main

    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"text": "a b"}\n')
    (tmp_path / "broken.json").write_text("{not json")
    for name in ("missing.json", "broken.json"):
        code = main(
            ["build", str(docs), str(tmp_path / "out"), "--tokenizer", str(tmp_path / name)]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith("Error:") and name in err[0]


def test_a_tokenizer_that_is_no_regular_file_is_named_once(tmp_path: Path) -> None:
    # The reading door's error named the file, and load_tokenizer named it again:
    # "tokenizer P: P: not a regular file (a FIFO)". (tests/helpers/doors.py plants a FIFO,
    # /dev/zero, a huge file and bad JSON at a token build's tokenizer path.)
    fifo = tmp_path / "tokenizer.json"
    os.mkfifo(fifo)
    options = shardkit.BuildOptions(tokenizer=str(fifo), workers=1)
    with pytest.raises(ConfigError, match=r"not a regular file \(a FIFO\)") as got:
        shardkit.build([{"text": "a b"}], str(tmp_path / "out"), options=options)
    assert str(got.value).count(str(fifo)) == 1


def test_resume_with_another_tokenizer_refused(corpus: dict[str, Any], tmp_path: Path) -> None:
    root = corpus["root"]
    out = tmp_path / "out"
    out.mkdir()
    from shardkit.builder._journal import JOURNAL_NAME
    from shardkit.builder._tokens import load_tokenizer

    header = {"tokens_journal": 1, "tokenizer": {"path": "x", "sha256": "0" * 64, "vocab_size": 3}}
    (out / JOURNAL_NAME).write_text(json.dumps(header) + "\n")
    options = shardkit.BuildOptions(tokenizer=str(root / "tokenizer.json"), workers=1)
    with pytest.raises(ConfigError, match="tokenizer changed"):
        shardkit.build(str(root / "docs.jsonl"), str(out), options=options)
    assert load_tokenizer(str(root)).vocab_size <= 1 << 16


def test_resume_after_a_kill_keeps_finished_shards(corpus: dict[str, Any], tmp_path: Path) -> None:
    root = corpus["root"]
    out = tmp_path / "out"
    options = shardkit.BuildOptions(
        tokenizer=str(root / "tokenizer.json"), max_count=800, workers=1
    )
    whole = tmp_path / "whole"
    shardkit.build(str(root / "docs.jsonl"), str(whole), options=options)
    first = {p.name: p.read_bytes() for p in whole.glob("*.tar")}

    def stop_after_two(progress: shardkit.BuildProgress) -> None:
        if progress.shards == 2:
            raise KeyboardInterrupt  # as if killed once two shards are journaled

    with pytest.raises(KeyboardInterrupt):
        shardkit.build(str(root / "docs.jsonl"), str(out), options=options, progress=stop_after_two)
    from shardkit.builder._journal import JOURNAL_NAME

    assert (out / JOURNAL_NAME).exists() and not (out / "manifest.json").exists()
    (out / "shard-000001.tar").write_bytes(b"damaged")  # a recorded shard that changed
    result = shardkit.build(str(root / "docs.jsonl"), str(out), options=options)
    assert result.resumed_tasks == 1  # shard 0 kept; shard 1 written again
    assert {p.name: p.read_bytes() for p in out.glob("*.tar")} == first
    assert not (out / JOURNAL_NAME).exists()


def _key(item: dict[str, Any]) -> tuple[bytes, bytes]:
    return (
        np.asarray(item["input_ids"]).tobytes(),
        np.asarray(item["position_ids"]).tobytes(),
    )


def test_loader_workers_read_every_item_once(corpus: dict[str, Any]) -> None:
    pytest.importorskip("torch")
    alone = list(shardkit.Dataset(corpus["out"], seed=0).pack(700))  # exact: tested above
    ds = shardkit.Dataset(corpus["out"], seed=0).pack(700)
    items = list(shardkit.Loader(ds, num_workers=2))
    assert sorted(map(_key, items)) == sorted(map(_key, alone))
    loader = shardkit.Loader(shardkit.Dataset(corpus["out"], seed=0).pack(700), num_workers=2)
    it = iter(loader)
    head = [next(it) for _ in range(9)]
    state = loader.state_dict()
    del it
    again = shardkit.Loader(shardkit.Dataset(corpus["out"], seed=0).pack(700), num_workers=2)
    again.load_state_dict(state)
    tail = list(again)
    assert [_key(i) for i in head + tail] == [_key(i) for i in items]


def _documents_of(out: str) -> list[tuple[int, ...]]:
    return _sorted(_documents(list(shardkit.Dataset(out).pack(64, shuffle=False))))


def test_every_text_source_gives_the_same_documents(corpus: dict[str, Any], tmp_path: Path) -> None:
    """A CSV list, a parquet list, a folder of .txt files and a datasets.Dataset give the
    documents the JSONL list gives."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    root = corpus["root"]
    tok = str(root / "tokenizer.json")
    texts = _texts(60, 5)
    expected = _sorted(tokenizers.Tokenizer.from_file(tok).encode(t).ids for t in texts)
    options = shardkit.BuildOptions(tokenizer=tok, workers=1, text_column="body")
    (tmp_path / "d.csv").write_text("body\n" + "\n".join(texts) + "\n")
    pq.write_table(pa.table({"body": texts}), tmp_path / "d.parquet")
    (tmp_path / "txt").mkdir()
    for i, text in enumerate(texts):
        (tmp_path / "txt" / f"{i:03d}.txt").write_text(text)
    sources: list[Any] = [
        str(tmp_path / "d.csv"),
        str(tmp_path / "d.parquet"),
        str(tmp_path / "txt"),
    ]
    datasets = pytest.importorskip("datasets")
    sources.append(datasets.Dataset.from_dict({"body": texts}))
    for i, source in enumerate(sources):
        out = str(tmp_path / f"out{i}")
        shardkit.build(source, out, options=options)
        assert _documents_of(out) == expected, source


def test_mix_of_packs_resumes_item_for_item(corpus: dict[str, Any], tmp_path: Path) -> None:
    prefix = str(tmp_path / "m_text_document")
    _write_megatron(prefix, [np.array(d, dtype=np.uint16) + 1000 for d in corpus["expected"]])

    def make() -> shardkit.Dataset:
        a = shardkit.Dataset(corpus["out"], seed=0).pack(256)
        b = shardkit.Dataset(prefix + ".bin", seed=0).pack(256)
        return shardkit.mix([a, b], weights=[3, 1], seed=4)

    full = [_key(i) for i in make()]
    assert len(full) == len(make())
    run = make()
    it = iter(run)
    head = [_key(next(it)) for _ in range(50)]
    state = run.state_dict()
    again = make()
    again.load_state_dict(state)
    assert head + [_key(i) for i in again] == full


def test_loader_states_resume_elastically(corpus: dict[str, Any]) -> None:
    pytest.importorskip("torch")

    def make(rank: int, world: int) -> shardkit.Dataset:
        return shardkit.Dataset(corpus["out"], seed=6, node=(rank, world)).pack(500)

    seen, states = [], []
    for rank in range(2):
        loader = shardkit.Loader(make(rank, 2), num_workers=2)
        it = iter(loader)
        seen += [_key(next(it)) for _ in range(4 + rank)]
        states.append(loader.state_dict())
        del it
    for rank in range(3):
        again = shardkit.Loader(make(rank, 3), num_workers=1)
        again.load_state_dict(states)
        seen += [_key(i) for i in again]
    assert sorted(seen) == sorted(_key(i) for i in make(0, 1))


def test_killed_build_resumes_to_the_same_bytes(corpus: dict[str, Any], tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    root = corpus["root"]
    out = tmp_path / "killed"
    script = (
        "import shardkit\n"
        "if __name__ == '__main__':\n"
        f"    o = shardkit.BuildOptions(tokenizer={str(root)!r}, max_count=100, workers=1)\n"
        f"    shardkit.build({str(root / 'docs.jsonl')!r}, {str(out)!r}, options=o)\n"
    )
    (tmp_path / "run.py").write_text(script)
    child = subprocess.Popen([sys.executable, str(tmp_path / "run.py")], env=os.environ.copy())
    from shardkit.builder._journal import JOURNAL_NAME

    journal = out / JOURNAL_NAME
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if journal.exists() and len(journal.read_text().splitlines()) >= 4:
            break
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert not (out / "manifest.json").exists()  # killed mid-build
    (out / ".shard-000020.tar.tmp-0123456789abcdef").write_bytes(b"cut short")  # as a kill leaves
    options = shardkit.BuildOptions(tokenizer=str(root), max_count=100, workers=2)
    result = shardkit.build(str(root / "docs.jsonl"), str(out), options=options)
    assert result.resumed_tasks >= 3
    whole = tmp_path / "whole"
    shardkit.build(str(root / "docs.jsonl"), str(whole), options=options)
    names = sorted(p.name for p in whole.glob("*.tar"))
    assert sorted(p.name for p in out.glob("*.tar")) == names and len(names) == 25
    assert all((out / n).read_bytes() == (whole / n).read_bytes() for n in names)
    assert not list(out.glob(".*tmp*"))  # no temporary file left behind


#: sha256 of the shards the token build on main 5c111d2 (its own driver) wrote for
#: :func:`_golden_corpus`: the build on the shared journal, store and cleanup keeps them.
_GOLDEN = {
    "shard-000000.tar": "4028c159749a8ca6eeba78bf4e84d806f95d95dcd372836d994a5e912ed60080",
    "shard-000001.tar": "5396600023664b62ad2bbbcfd8b564ff7c79879171d7f9718a97ab1ebdb86bed",
    "shard-000002.tar": "6e07886ed0a90239d8d166c9b9bf86651bcdbb65877fd3e38e133b503a314fad",
    "shard-000003.tar": "93c11d6d77035765665b63c376e6cffd6f8c70170c098ae4cac50e23c26c074e",
    "shard-000004.tar": "71d83d3aa45b2fcbbec59f6853c284d76c13f65d87866cac8c4973c546884ee4",
}


def _golden_corpus(root: Path) -> tuple[str, str]:
    """A fixed word-level tokenizer (no training) and 40 rows, 7 of them empty."""
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(root / "tok.json"))
    with open(root / "docs.jsonl", "w") as f:
        for i in range(40):
            text = " ".join(words[(i * 7 + j) % 8] for j in range(i % 13)) if i % 11 else ""
            f.write(json.dumps({"text": text}) + "\n")
    return str(root / "docs.jsonl"), str(root / "tok.json")


def test_token_shards_keep_the_bytes_of_the_first_token_build(tmp_path: Path) -> None:
    import hashlib

    docs, tok = _golden_corpus(tmp_path)
    options = shardkit.BuildOptions(tokenizer=tok, max_count=7, workers=2)
    result = shardkit.build(docs, tmp_path / "out", options=options)
    got = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "out").glob("*.tar")
    }
    assert got == _GOLDEN and len(result.skipped) == 7
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert (manifest["tokens"], manifest["documents"]) == (207, 33)


def test_token_build_into_a_file_url_writes_that_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where a "file:" folder would appear
    docs, tok = _golden_corpus(tmp_path)
    options = shardkit.BuildOptions(tokenizer=tok, max_count=7, workers=1)
    result = shardkit.build(docs, f"file://{tmp_path}/out", options=options)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["manifest.json", *_GOLDEN]
    assert result.out == str(tmp_path / "out") and not (tmp_path / "file:").exists()
