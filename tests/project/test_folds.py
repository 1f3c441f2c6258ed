"""The folds that a scan of the source keeps folded: one reading door
(:mod:`shardkit.storage._doors`) and one JSON parse (:func:`shardkit.codecs.parse_json`,
which :func:`shardkit.formats.jsondoc.load_json` wraps for documents). Each scan is run on
a second implementation too, to show it would catch one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import shardkit
from shardkit.pipeline._state import Position

ROOT = Path(shardkit.__file__).parent


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _json_parses(source: str) -> int:
    """How many calls of the standard JSON parser ``source`` makes."""
    return sum(
        _dotted(call.func) in ("json.loads", "json.load") for call in _calls(ast.parse(source))
    )


def _opens(source: str) -> list[bool]:
    """Each file ``source`` opens: whether it opens it to write (``open`` with a mode
    that writes, appends or creates; ``os.open`` with flags that do, a variable's or a
    constant's value looked up) rather than to read."""
    tree = ast.parse(source)
    assigned = {  # a name's value, for flags held in a variable or constant
        target.id: ast.unparse(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found = []
    for call in _calls(tree):
        name = _dotted(call.func)
        if name in ("open", "io.open"):
            mode = call.args[1] if len(call.args) > 1 else None
            mode = next((k.value for k in call.keywords if k.arg == "mode"), mode)
            text = mode.value if isinstance(mode, ast.Constant) else "r"
            found.append(any(ch in str(text) for ch in "wax+"))
        elif name == "os.open":
            given = call.args[1] if len(call.args) > 1 else ast.Constant(0)
            names = [n.id for n in ast.walk(given) if isinstance(n, ast.Name)]
            flags = " ".join([ast.unparse(given), *(assigned.get(n, "") for n in names)])
            found.append(any(f in flags for f in ("O_WRONLY", "O_RDWR", "O_CREAT")))
    return found


def _opens_to_read(source: str) -> int:
    """How many files ``source`` opens for reading without the door."""
    return sum(not writes for writes in _opens(source))


def _opens_to_write(source: str) -> int:
    """How many files ``source`` opens for writing without ``AtomicFile``."""
    return sum(_opens(source))


def _modules() -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in sorted(ROOT.rglob("*.py"))}


def test_one_json_parse() -> None:
    parsers = {name for name, text in _modules().items() if _json_parses(text)}
    assert parsers == {"codecs/_text.py"}  # parse_json
    assert _json_parses("import json\ndef load(b):\n    return json.loads(b)\n") == 1


# Files read without the door, each for a reason: none is a file shardkit finds in data.
OWN_FILES = {
    "builder/_lease.py": "the kernel's boot id under /proc",
    "builder/_spill.py": "a spill file this process wrote in its private temporary folder",
    "config.py": "the kernel's cgroup CPU quota",
    "demo.py": "an image the demo wrote a moment before",
    "engines/_local.py": "the user's own __main__ script, read back for its guard",
}


def test_one_reading_door() -> None:
    readers = {
        name
        for name, text in _modules().items()
        if _opens_to_read(text) and not name.startswith("storage/")
    }
    assert readers == set(OWN_FILES), "read it through storage.open_regular / read_document"
    assert _opens_to_read("def read(p):\n    with open(p, 'rb') as f:\n        return f.read()\n")
    assert _opens_to_read("import os\nfd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)\n")
    assert not _opens_to_read("with open(p, 'xb') as f:\n    f.write(b'')\n")


def _store_switches(source: str) -> int:
    """How many times ``source`` asks which kind of build output a store is."""
    return sum(
        _dotted(call.func) == "isinstance"
        and len(call.args) == 2
        and any(n in ast.unparse(call.args[1]) for n in ("LocalStore", "ObjectStore"))
        for call in _calls(ast.parse(source))
    )


def test_a_store_is_used_through_its_protocol() -> None:
    """What differs between a local folder and an object store is a member of the
    ``Store`` protocol (builder/_store.py), not an ``isinstance`` switch (six were)."""
    switching = {name for name, text in _modules().items() if _store_switches(text)}
    assert not switching
    assert _store_switches("threads = 4 if isinstance(store, ObjectStore) else 0\n") == 1


def test_a_position_is_built_by_name() -> None:
    """``Position`` took eleven positional arguments; now each is named."""
    with pytest.raises(TypeError):
        Position(0, 0, False, 0, 1, 1)  # type: ignore[misc]
    saved = Position(epoch=0, consumed=3, done=False, seed=0, world=1, workers=1)
    assert saved.as_dict()["consumed"] == 3


def test_loader_passes_the_worker_shift_rather_than_writing_it() -> None:
    """The Loader handed a resumed round robin's first stream to its dataset by writing
    ``dataset._worker_shift``; it passes it to the iteration now."""
    assert not any("_worker_shift" in text for text in _modules().values())


# Files written without AtomicFile, each for a reason: none is read as data afterwards.
OWN_WRITES = {
    "_flock.py": "a lock file",
    "_temporary.py": "the temporary itself (the writing door AtomicFile goes through)",
    "builder/_journallog.py": "the journal, appended line by line, never through a link",
    "builder/_spill.py": "a spill file in the build's private temporary folder",
    "cachelimit.py": "the cache's lock file",
    "engines/testing.py": "a marker file of the test engines",
    "tools/proc.py": "a sample's fields, into proc's private temporary folder",
}


def test_one_writing_door() -> None:
    writers = {
        name
        for name, text in _modules().items()
        if _opens_to_write(text) and not name.startswith("storage/")
    }
    assert writers == set(OWN_WRITES), "write it through storage.open_atomic / atomic_write"
    assert _opens_to_write("with open(p, 'wb') as f:\n    f.write(b'')\n")
    assert not _opens_to_write("with open(p, 'rb') as f:\n    f.read()\n")


# "The one X" of a docstring: the module that owns X, and what only it may spell.
CLAIMS = {
    "config.py": ("environment variables", ("os.getenv", "environ.get", "environ[")),
    "formats/_tarparse.py": ("the tar member parser", ("class TarScanner", "import tarfile")),
    "_temporary.py": ("the temporary names", ("O_EXCL",)),
    "_flock.py": ("an exclusive flock without waiting", ("LOCK_NB",)),
    "cli/_toolargs.py": ("the CLI's error line", ('"Error: ', 'f"Error: ')),
    "tools/_media.py": ("a field's thumbnail", (".thumbnail(",)),
    "pipeline/_idxfiles.py": ("trusting an .idx file", ("check_index(",)),
    "engines/_connect.py": ("the error of a worker that kept dying", ("or out of memory?",)),
}


@pytest.mark.parametrize("owner", sorted(CLAIMS))
def test_a_claim_of_one_owner_holds(owner: str) -> None:
    what, spellings = CLAIMS[owner]
    modules = _modules()
    assert any(s in modules[owner] for s in spellings)
    others = sorted(
        name
        for name, text in modules.items()
        if name != owner
        and any(
            s in line
            for line in text.splitlines()
            if not line.lstrip().startswith(("#", "(:func:", "``", "def "))
            for s in spellings
        )
    )
    assert others == [], f"{what}: only {owner} may do it, not {others}"


def _functions_calling(source: str, name: str) -> set[str]:
    """The functions of ``source`` (``Class.method`` for a method; a nested function
    counts as the one around it) that call ``name`` (or ``something.name``)."""
    found = set()

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(_dotted(call.func).split(".")[-1] == name for call in _calls(child)):
                    found.add(prefix + child.name)
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


# A stage loop of its own that asks which errors its handler takes, as four once did.
_GUARDED_LOOP_COPY = "def apply(items):\n    return [i for i in items if handles(i, False)]\n"


def test_one_loop_hands_a_stage_function_error_to_its_handler() -> None:
    """``pipeline/_stages.guarded`` is the loop that applies a function to each item and
    hands what it raises to the stage's handler (map, map_dict, map_tuple and the serial
    decode had each a copy); the threaded decode takes its threads' errors in order."""
    owners = {
        f"{module}:{function}"
        for module, text in _modules().items()
        for function in _functions_calling(text, "handles")
    }
    assert owners == {"pipeline/_stages.py:guarded", "pipeline/_decode.py:_ParallelDecode.__next__"}
    assert _functions_calling(_GUARDED_LOOP_COPY, "handles") == {"apply"}


def test_the_field_stages_share_one_run() -> None:
    """``to_tuple`` and ``rename`` are :class:`FieldStage` s: the run that counts the
    fields (the reader's withheld samples too) and checks them at the end is written
    once, in the base, and the chain finds the field stages by that base."""
    from shardkit.pipeline._stages import FieldStage, Rename, ToTuple

    assert issubclass(ToTuple, FieldStage) and issubclass(Rename, FieldStage)
    owners = {
        f"{module}:{function}"
        for module, text in _modules().items()
        for function in _functions_calling(text, "see_withheld")
    }
    assert owners == {"pipeline/_stages.py:FieldStage.run"}
