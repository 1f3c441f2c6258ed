"""One table of limits: no module but ``budget.py`` defines a size limit of its own.

A source scan over ``src/shardkit``: every module-level constant named like a limit
(``MAX``/``LIMIT`` as a word of its name) whose value is a number written in the source is
a second way to bound a size, unless it is listed here with the reason it is not a budget
(a format's own field width, an option's range, how much of a message is kept). A
decoder that bounds an untrusted size with a constant of its own (``MAX_FRAME_BYTES =
64 << 20``) fails this test: it names a row of :data:`shardkit.budget.LIMITS` instead
(or, for a module that must export the default, ``LIMITS[kind].default``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import shardkit

_SRC = Path(shardkit.__file__).parent
_NAME = re.compile(r"(?:^|_)(?:MAX|LIMIT)(?:_|$)")

#: The limit-named constants that are not budgets, each with its reason.
NOT_BUDGETS = {
    # formats: the formats' own rules, the same for every reader and writer
    "formats/limits.py:MAX_MEMBER_SIZE": "writers' cap; a member table's sizes are uint32",
    "formats/limits.py:MAX_RECORD_LENGTH": "protobuf's own limit on a message (2 GiB)",
    "formats/limits.py:MAX_TAR_META_SIZE": "one extended header; the chain is tar_chain's",
    "formats/limits.py:MAX_SKIPPED_SIZE": "sanity of a member streamed past, never held",
    "formats/members.py:_MAX_SIZE": "the member table's uint32 size field",
    "formats/members.py:_MAX_LAYOUTS": "the member table's uint16 layout field",
    "formats/_tarderive.py:_MAX_LAYOUTS": "the member table's uint16 layout field",
    "formats/_protobuf.py:_INT64_MAX": "protobuf's int64 range",
    "formats/_protobuf.py:_MAX_TAG": "protobuf's field-number range",
    "formats/_protobuf.py:_MAX_GROUP_DEPTH": "protobuf's own recursion limit for groups",
    "formats/names.py:MAX_PATTERN_WIDTH": "digits of a shard-name pattern (an option)",
    "formats/cut.py:WRITER_MAX_COUNT": "default shard cut (an option, not read data)",
    "formats/cut.py:WRITER_MAX_SIZE": "default shard cut (an option, not read data)",
    "formats/cut.py:BUILD_MAX_COUNT": "default shard cut (an option, not read data)",
    "formats/cut.py:BUILD_MAX_SIZE": "default shard cut (an option, not read data)",
    # options, state and messages: ranges of what a caller passes, or text kept
    "units.py:MAX_INT": "the range of an integer option",
    "units.py:MAX_SEED": "the range of a seed",
    "units.py:MAX_SECONDS": "the range of a duration option",
    "errors.py:MESSAGE_LIMIT": "characters of an error message kept",
    "errors.py:NAME_LIMIT": "characters of a URL or key named in an error",
    "pipeline/_state.py:_MAX": "the range of a counter in a resume state",
    "pipeline/_state.py:_MAX_STREAMS": "streams in a resume state (a JSON document's list)",
    "pipeline/_decode.py:MAX_DEFAULT_THREADS": "decode threads by default",
    "pipeline/_decode.py:_MAX_CAUSE": "characters of a wrapped error kept",
    "pipeline/_loader.py:MAX_PREFETCHED": "batches a state may leave out (an option)",
    "storage/_cache.py:_DRAIN_LIMIT": "bytes drained on close to complete a cached copy",
    "storage/_remote.py:_BACKOFF_MAX_S": "seconds between retries",
    "builder/_shards.py:_MAX_COUNTED_CLASSES": "labels named in a manifest",
    "builder/_shards.py:_MAX_TAIL": "bytes after a tar's last sample, checked, read whole",
    "builder/_skipped.py:_MAX_TEXT": "characters of a skipped path or reason kept",
    "builder/_tables.py:MAX_LABEL": "the range of a class number (a list's label)",
    "builder/_tokens.py:_TOKENIZER_LIMIT": "a source file the user names: its real size",
    "tools/proc.py:_STEM_MAX": "characters of a file name proc makes",
    "tools/proc.py:_NAME_MAX": "bytes of a file name (the file systems' limit)",
    "tools/view/_pages.py:_TEXT_LIMIT": "characters of a field shown on a page",
    "tools/view/_server.py:_MAX_PAGE": "samples per page (a request is clamped to it)",
}


def _literal(node: ast.expr) -> bool:
    """Whether ``node`` is a number written in the source (``1 << 30``, ``10**9``)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return _literal(node.left) and _literal(node.right)
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    return False


def limit_constants(path: Path, root: Path) -> list[str]:
    """``module:NAME`` of each module-level constant of ``path`` named like a limit whose
    value is a number written in the source."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name) and _NAME.search(target.id) and _literal(value):
                found.append(f"{path.relative_to(root).as_posix()}:{target.id}")
    return found


def _all_limit_constants() -> set[str]:
    return {
        name
        for path in sorted(_SRC.rglob("*.py"))
        if path.name != "budget.py"
        for name in limit_constants(path, _SRC)
    }


def test_no_module_but_the_budget_defines_a_size_limit_of_its_own() -> None:
    found = _all_limit_constants()
    second = sorted(found - set(NOT_BUDGETS))
    assert not second, (
        "limits defined outside shardkit.budget (add a LIMITS row and allow() through it, "
        f"or list the constant in NOT_BUDGETS with the reason it is no budget): {second}"
    )
    stale = sorted(set(NOT_BUDGETS) - found)
    assert not stale, f"NOT_BUDGETS lists constants that are gone: {stale}"


def test_the_scan_finds_a_second_limit_and_passes_an_alias_of_the_budget(
    tmp_path: Path,
) -> None:
    module = tmp_path / "decoder.py"
    module.write_text(
        "from ..budget import LIMITS\n"
        "MAX_FRAME_BYTES = 64 << 20\n"
        "_LIMIT: int = 10**6\n"
        "MAX_DOCUMENT_SIZE = LIMITS['document'].default\n"
        "CHUNK = 1 << 20\n"
        "def f():\n"
        "    MAX_LOCAL = 5\n"
    )
    assert limit_constants(module, tmp_path) == ["decoder.py:MAX_FRAME_BYTES", "decoder.py:_LIMIT"]
