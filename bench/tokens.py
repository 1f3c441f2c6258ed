"""Token streams: shardkit's token build and ``pack`` against litdata's ``optimize`` and
``TokensLoader`` (issue 30), side by side in one process, over the same tokens.

Run in the peers' venv (litdata, tokenizers, torch) with this tree on the path::

    PYTHONPATH=src /work/peers/bin/python bench/tokens.py --docs 20000 --workers 2

It writes a JSONL corpus of documents of mixed lengths, trains a BPE tokenizer on it
(offline), then measures:

* build: ``shardkit.build(docs.jsonl, OUT, BuildOptions(tokenizer=...))`` against
  ``litdata.optimize(fn=tokenize, ..., item_loader=TokensLoader(), chunk_size=2049 *
  1024)``, the same tokenizer and worker count: tokens/s;
* read: ``Dataset(OUT).pack(seq_len=2048)`` against ``StreamingDataset(litdata_out,
  item_loader=TokensLoader(block_size=2049))``, in-process steady state (the second of two
  passes): tokens/s.

Results go to ``bench/results/tokens.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from typing import Any

import numpy as np

WORDS = [f"w{i}" for i in range(3000)]


def _corpus(path: str, docs: int) -> None:
    rng = np.random.default_rng(0)
    lengths = rng.lognormal(5.5, 1.0, docs).astype(int) + 1
    with open(path, "w") as f:
        for n in lengths:
            f.write(json.dumps({"text": " ".join(rng.choice(WORDS, int(n)))}) + "\n")


def _tokenizer(corpus: str, path: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    texts = _texts(corpus)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=4000, special_tokens=["[UNK]"]))
    tok.save(path)


def _texts(corpus: str) -> list[str]:
    with open(corpus) as f:
        return [json.loads(line)["text"] for line in f]


_TOKENIZER: Any = None


def _lit_tokenize(args: tuple[str, list[str]]) -> Any:
    """litdata's optimize fn: a slice of the corpus's texts, tokenized document by document."""
    import torch
    from tokenizers import Tokenizer

    global _TOKENIZER
    tokenizer, texts = args
    if _TOKENIZER is None:
        _TOKENIZER = Tokenizer.from_file(tokenizer)
    for text in texts:
        yield torch.tensor(_TOKENIZER.encode(text).ids, dtype=torch.int32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="bench/results/tokens.json")
    parser.add_argument("--reads", type=int, default=1, help="read passes measured (best)")
    args = parser.parse_args()

    import litdata
    from litdata.streaming.item_loader import TokensLoader

    import shardkit

    root = tempfile.mkdtemp(prefix="bench-tokens-")
    try:
        corpus, tok = os.path.join(root, "docs.jsonl"), os.path.join(root, "tokenizer.json")
        _corpus(corpus, args.docs)
        _tokenizer(corpus, tok)
        out = os.path.join(root, "shardkit")
        t = time.perf_counter()
        options = shardkit.BuildOptions(
            tokenizer=tok, workers=args.workers, max_count=2000, hash="none"
        )
        shardkit.build(corpus, out, options=options)
        ours_build = time.perf_counter() - t
        with open(os.path.join(out, "manifest.json")) as f:
            tokens = json.load(f)["tokens"]

        lit = os.path.join(root, "litdata")
        step = 2000
        texts = _texts(corpus)
        inputs = [(tok, texts[a : a + step]) for a in range(0, args.docs, step)]
        t = time.perf_counter()
        litdata.optimize(
            fn=_lit_tokenize,
            inputs=inputs,
            output_dir=lit,
            chunk_size=2049 * 1024,
            item_loader=TokensLoader(),
            num_workers=args.workers,
        )
        lit_build = time.perf_counter() - t

        ds = shardkit.Dataset(out, seed=0).pack(seq_len=2048)
        lds = litdata.StreamingDataset(lit, item_loader=TokensLoader(block_size=2049))
        ours_read, lit_read = (0, 0.0), (0, 0.0)
        for _ in range(args.reads):  # alternating, the best of each (a noisy machine)
            ours = _steady(lambda: sum(len(i["input_ids"]) for i in ds))
            theirs = _steady(lambda: sum(len(x) for x in lds))
            ours_read, lit_read = max(ours_read, ours), max(lit_read, theirs)
        result = {
            "docs": args.docs,
            "tokens": tokens,
            "workers": args.workers,
            "build_tokens_per_s": {"shardkit": tokens / ours_build, "litdata": tokens / lit_build},
            "read_tokens_per_s": {"shardkit": ours_read[1], "litdata": lit_read[1]},
            "read_tokens": {"shardkit": ours_read[0], "litdata": lit_read[0]},
        }
        result["build_ratio"] = ours_build and lit_build / ours_build
        result["read_ratio"] = ours_read[1] / lit_read[1]
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _steady(read: Any) -> tuple[int, float]:
    """Tokens of one pass and tokens/s of the second pass (the first warms caches)."""
    read()
    t = time.perf_counter()
    n = read()
    return n, n / (time.perf_counter() - t)


if __name__ == "__main__":
    main()
