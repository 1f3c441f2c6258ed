"""Settings travel as objects (issue 29, item 4): fsspec's ``storage_options`` is taken at
the public doors only and resolved there into one :class:`~shardkit.storage.Access`;
progress callbacks are taken where a run starts; the tools and ``map_shards`` share one
keyword bundle each, resolved into one run object; the four CLI subcommands that write
shards go through one body. The scans read the source, and are run on a spread-out
copy too, to show they would catch one."""

from __future__ import annotations

import argparse
import ast
import pickle
from pathlib import Path
from typing import Any

import pytest
from helpers.tools import samples, write_shards

import shardkit
from shardkit import storage, tools
from shardkit.cli import _toolargs
from shardkit.mapshards import map_shards
from shardkit.storage import LOCAL, Access
from shardkit.tools._inputs import ShardRef, as_refs

ROOT = Path(shardkit.__file__).parent

#: The functions that take ``storage_options=`` (the public doors), by module and name:
#: each resolves it with ``Access.of`` or hands it to another door. A new one is added
#: here on purpose; everything below a door takes the ``Access``.
DOORS = {
    "pipeline/_dataset.py:__init__",  # Dataset
    "pipeline/_indexed.py:__init__",  # IndexedDataset
    "pipeline/_urls.py:resolve_source",
    "pipeline/_idxfiles.py:load_index",  # shardkit.tools.load_index
    "reader.py:read_shard",
    "writer.py:__init__",  # ShardWriter
    "storage/_access.py:of",  # Access.of itself
    "storage/_access.py:given",
    "tools/_inputs.py:read_manifest",
    "tools/_inputs.py:resolve_inputs",
    "tools/grid.py:contact_sheet",
    "tools/index.py:build_index",
    "tools/index.py:write_index",
    "tools/index.py:read_indexed_sample",
    "tools/split.py:write_shards",
    "tools/tsv.py:write_tsv",
}

#: Issue 29's bars: functions with a parameter of this name (70 and 28 before the fold).
BARS = {"storage_options": 20, "progress": 12}


def _functions(source: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = node.args
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]


def _taking(sources: dict[str, str], name: str) -> list[str]:
    """``module:function`` of every function with a parameter called ``name``."""
    return [
        f"{module}:{node.name}"
        for module, source in sources.items()
        for node in _functions(source)
        if name in _parameters(node)
    ]


def _sources() -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in sorted(ROOT.rglob("*.py"))}


_SPREAD = """
def helper(url, storage_options=None, progress=None):
    return inner(url, storage_options, progress)
"""


def test_the_scan_counts_a_function_that_takes_the_settings_again() -> None:
    sources = _sources()
    spread = {**sources, "tools/_spread.py": _SPREAD}
    for name in BARS:
        assert len(_taking(spread, name)) == len(_taking(sources, name)) + 1
    assert "tools/_spread.py:helper" in set(_taking(spread, "storage_options")) - DOORS


@pytest.mark.parametrize("name", sorted(BARS))
def test_the_settings_stay_under_the_bar(name: str) -> None:
    found = _taking(_sources(), name)
    assert len(found) <= BARS[name], found


def test_storage_options_is_taken_at_the_doors_only() -> None:
    assert set(_taking(_sources(), "storage_options")) == DOORS


def _loose_uses(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[int]:
    """Lines where ``node`` uses its ``storage_options`` other than by resolving it
    (``Access.of(storage_options)``, ``Access.given``) or handing it to a door
    (``storage_options=``)."""
    allowed: set[int] = set()
    for call in ast.walk(node):
        if not isinstance(call, ast.Call):
            continue
        if ast.unparse(call.func).endswith(("Access.of", "Access.given")):
            allowed.update(id(arg) for arg in call.args)
        allowed.update(id(k.value) for k in call.keywords if k.arg == "storage_options")
    return [
        name.lineno
        for name in ast.walk(node)
        if isinstance(name, ast.Name) and name.id == "storage_options" and id(name) not in allowed
    ]


def test_every_door_resolves_its_storage_options_at_once() -> None:
    loose = {}
    for module, source in _sources().items():
        if module == "storage/_access.py":  # Access.of: the resolving itself
            continue
        for node in _functions(source):
            if "storage_options" in _parameters(node) and _loose_uses(node):
                loose[f"{module}:{node.name}"] = _loose_uses(node)
    assert loose == {}
    spread = _functions(_SPREAD.replace("helper", "door"))[0]
    assert _loose_uses(spread) == [3]  # the scan sees a door that passes the dict on


def test_access_of_resolves_once() -> None:
    options = {"endpoint_url": "http://127.0.0.1:1"}
    access = Access.of(options)
    assert access.storage_options == options
    options["key"] = "changed later"  # the door took a copy
    assert "key" not in access.storage_options
    assert Access.of(access) is access
    assert Access.of(None) is LOCAL
    assert pickle.loads(pickle.dumps(access)) == access  # it travels to workers
    with pytest.raises(TypeError, match="storage_options must be a dict"):
        Access.of("endpoint_url=x")  # type: ignore[arg-type]


def test_refs_carry_their_access_and_as_refs_fills_in_the_runs() -> None:
    mine = Access({"anon": True})
    run = Access({"anon": False})
    given = [ShardRef("a.tar", "tar", False), ShardRef("b.tar", "tar", False, access=mine)]
    got = as_refs(given, run)
    assert [ref.access for ref in got] == [run, mine]
    assert got == given  # access is not part of a ref's identity


def test_resolved_refs_carry_the_storage_options_they_were_given(tmp_path: Path) -> None:
    shard = write_shards(str(tmp_path / "in"), samples(3), per_shard=5)[0]
    options = {"anon": True}
    refs = tools.resolve_inputs([shard], storage_options=options)
    assert [ref.access for ref in refs] == [Access(options)]
    assert [ref.access for ref in tools.resolve_inputs([shard])] == [None]  # the run's


@pytest.mark.parametrize(
    "call",
    [
        lambda src, out: tools.cat(src, out, bogus=1),
        lambda src, out: tools.convert(src, out, bogus=1),
        lambda src, out: tools.split(src, out, max_count=1, bogus=1),
        lambda src, out: tools.proc(src, "true", out, bogus=1),
        lambda src, out: tools.stats(src, bogus=1),
        lambda src, out: tools.verify(src, hash="sha256"),  # verify writes nothing
        lambda src, out: list(tools.iter_cat(src, on_shard=print)),
        lambda src, out: tools.write_indexes([src], bogus=1),
        lambda src, out: map_shards(dict, [src], [out], bogus=1),
    ],
)
def test_a_keyword_a_tool_does_not_take_is_a_type_error(call: Any, tmp_path: Path) -> None:
    """The keyword bundles are checked as a signature would be: nothing is dropped."""
    shard = write_shards(str(tmp_path / "in"), samples(2), per_shard=5)[0]
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        call(shard, str(tmp_path / "out-%06d.tar"))
    assert not list(tmp_path.glob("out-*"))


def test_tools_reach_storage_through_the_access_they_were_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a door resolved reaches the reads below it: each shard is opened with it."""
    shard = write_shards(str(tmp_path / "in"), samples(4), per_shard=2)
    opened: list[Access] = []
    real = storage.open_read

    def spy(url: str, **kwargs: Any) -> Any:
        opened.append(kwargs["access"])
        return real(url, **kwargs)

    monkeypatch.setattr(storage, "open_read", spy)
    options = {"marker": 1}
    written = tools.cat(shard, str(tmp_path / "all.tar"), storage_options=options)
    assert written == 4
    assert opened and all(access == Access(options) for access in opened)
    opened.clear()  # refs resolved without options are read with the run's
    refs = tools.resolve_inputs(shard)
    assert tools.cat(refs, str(tmp_path / "again.tar"), storage_options=options) == 4
    assert opened and all(access == Access(options) for access in opened)


# -- the CLI's one body

RUNNERS = ("cat", "convert", "split", "proc")


@pytest.mark.parametrize("name", RUNNERS)
def test_the_cli_runners_go_through_the_one_body(name: str) -> None:
    """Each runner calls ``run_tool`` and does none of its work itself."""
    source = (ROOT / "cli" / f"{name}.py").read_text()
    run = next(node for node in _functions(source) if node.name == "run")
    called = {ast.unparse(n.func) for n in ast.walk(run) if isinstance(n, ast.Call)}
    assert "run_tool" in called
    body_work = {"ShardBar", "check_stdin", "check_stdout", "digest_printer", "print"}
    assert called & body_work == set()


@pytest.mark.parametrize("name", RUNNERS)
def test_each_runner_runs_through_run_tool(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib

    from shardkit.cli import main

    module = importlib.import_module(f"shardkit.cli.{name}")
    seen: list[argparse.Namespace] = []

    def spy(args: argparse.Namespace, *rest: Any, **kwargs: Any) -> int:
        seen.append(args)
        return _toolargs.run_tool(args, *rest, **kwargs)

    monkeypatch.setattr(module, "run_tool", spy)
    shard = write_shards(str(tmp_path / "in"), samples(3), per_shard=5)[0]
    out = str(tmp_path / ("o-%03d.tar" if name in ("split", "proc") else "o.tar"))
    extra = {"split": ["--max-count", "2"], "proc": ["-e", "true"]}.get(name, [])
    assert main([name, shard, "-o", out, *extra]) == 0
    assert len(seen) == 1
    assert "3 samples" in capsys.readouterr().err
