from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import shardkit
from shardkit.cli import main


def test_all_is_sorted_and_every_name_exists() -> None:
    assert shardkit.__all__ == sorted(shardkit.__all__)
    for name in shardkit.__all__:
        assert hasattr(shardkit, name), name
    from shardkit.errors import MissingDependencyError
    from shardkit.reader import read_shard

    assert shardkit.read_shard is read_shard
    assert shardkit.MissingDependencyError is MissingDependencyError


def _modules_loaded_by(code: str) -> set[str]:
    """The modules a fresh interpreter loads to run ``code`` (beyond those it starts with)."""
    script = (
        "import sys\nbefore = set(sys.modules)\n"
        f"{code}\n"
        "print(','.join(sorted(set(sys.modules) - before)))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(out.stdout.strip().splitlines()[-1].split(","))


# Modules that cost milliseconds or megabytes and that no caller of `import shardkit` needs.
_HEAVY = {"torch", "tensorflow", "numpy", "PIL", "boto3", "s3fs", "gcsfs", "ray", "dask"}
_STDLIB_NOT_AT_IMPORT = {
    "concurrent.futures", "dataclasses", "email", "hashlib", "importlib.metadata", "json",
    "logging", "subprocess", "tarfile", "zipfile",
}  # fmt: skip


def test_import_is_light() -> None:
    loaded = _modules_loaded_by("import shardkit")
    assert not loaded & _HEAVY
    assert not loaded & _STDLIB_NOT_AT_IMPORT
    # Only the exceptions are imported up front; every other public name on first use.
    assert {m for m in loaded if m.startswith("shardkit")} == {
        "shardkit",
        "shardkit._lazy",
        "shardkit._version",
        "shardkit.errors",
    }


def test_lazy_names_and_submodules_are_there_on_first_use() -> None:
    loaded = _modules_loaded_by(
        "import shardkit\n"
        "from shardkit import BuildOptions, ShardWriter\n"
        "from shardkit.builder import BuildOptions as B\n"
        "assert BuildOptions is B and shardkit.ShardWriter is ShardWriter\n"
        "assert shardkit.storage.open_read is not None  # a submodule, imported when named\n"
        "assert 'Dataset' in dir(shardkit) and 'Dataset' in dir(shardkit.pipeline)\n"
        "try:\n    shardkit.no_such_name\nexcept AttributeError:\n    pass\n"
        "else:\n    raise SystemExit('no AttributeError')"
    )
    assert "shardkit.builder.options" in loaded and "shardkit.storage" in loaded
    assert "shardkit.pipeline._dataset" not in loaded  # dir() imported nothing


def test_reading_tar_shards_loads_neither_the_builder_nor_crc32c(tmp_path: Path) -> None:
    """``crc32c``'s own import loads importlib.metadata and email (about 8 MB): a process
    that reads only tar shards never needs it, nor the builder, mixing or the Loader."""
    path = tmp_path / "shard-000000.tar"
    with open(path, "wb") as f, shardkit.TarWriter(f) as writer:
        for i in range(3):
            writer.write({"__key__": f"s{i}", "txt": b"x"})
    loaded = _modules_loaded_by(
        f"from shardkit import Dataset\nassert sum(1 for _ in Dataset([{str(path)!r}])) == 3"
    )
    assert "shardkit.reader" in loaded
    unwanted = {"crc32c", "importlib.metadata", "email", "shardkit.builder"}
    assert not loaded & (unwanted | {"shardkit.pipeline._mixing", "shardkit.pipeline._loader"})
    assert not loaded & _HEAVY


def test_tfrecord_loads_crc32c_on_first_use() -> None:
    loaded = _modules_loaded_by(
        "from shardkit.formats import tfrecord\n"
        "import sys\n"
        "assert 'crc32c' not in sys.modules\n"
        "crc = 0xE3069283  # CRC32C('123456789'), RFC 3720\n"
        "masked = ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF\n"
        "assert tfrecord.masked_crc32c(b'123456789') == masked\n"
        "assert tfrecord.masked_crc32c(b'123456789') == masked  # the C function, bound now"
    )
    assert "crc32c" in loaded


def test_build_function_and_builder_modules_do_not_shadow_each_other() -> None:
    import shardkit.builder._worker as worker

    assert callable(shardkit.build)
    assert worker.__name__ == "shardkit.builder._worker"


def test_py_typed_is_shipped() -> None:
    from importlib.resources import files

    assert files("shardkit").joinpath("py.typed").is_file()


def test_cli_version_and_usage_errors(capsys: object) -> None:
    assert main([]) == 2
    assert main(["no-such-command"]) == 2
    out = subprocess.run(
        [sys.executable, "-m", "shardkit", "no-such-command"], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert out.stderr.startswith("Error: ") and len(out.stderr.strip().splitlines()) == 1


def test_error_fields_survive_pickling() -> None:
    import pickle

    from shardkit.errors import ChecksumError

    exc = ChecksumError("bad crc", url="s3://b/x.tfrecord", offset=1234, key="k")
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is ChecksumError
    assert (back.url, back.offset, back.key) == ("s3://b/x.tfrecord", 1234, "k")
    assert str(back) == "s3://b/x.tfrecord, sample 'k', offset 1234: bad crc"
    assert isinstance(back, ValueError)


def test_no_module_imports_its_own_package() -> None:
    """A package's ``__init__`` exports what its modules define, never the reverse: a
    module importing its own package is a cycle (``builder/_api`` once imported a helper
    of ``builder/__init__``, which imports ``api`` to run a build). import-linter's
    contracts (``make lint``) cover the cycles between sibling modules, not this one."""
    import grimp

    graph = grimp.build_graph("shardkit", exclude_type_checking_imports=True)
    back = sorted(
        f"{module} -> {imported}"
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if module.startswith(imported + ".")
    )
    assert back == []


def test_a_name_has_one_import_path() -> None:
    """A module's ``__all__`` lists what it defines: a name defined in another public
    module is imported from there, not through a second path (httpx's rule: a folded
    concept cannot be re-implemented behind a second name). A package's ``__init__``
    exports its modules' names (the public API), and a module may be the public door of
    a ``_private`` sibling (``formats.tar`` for ``_tarparse``)."""
    import ast

    root = Path(shardkit.__file__).parent
    second = set()
    for path in sorted(root.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported: dict[str, str] = {}
        exported: list[str] = []
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level:
                for alias in node.names:
                    imported[alias.asname or alias.name] = node.module or ""
            elif isinstance(node, ast.Assign) and "__all__" in [
                getattr(t, "id", None) for t in node.targets
            ]:
                exported = list(ast.literal_eval(node.value))
        for name in exported:
            home = imported.get(name)
            if home is not None and not home.rsplit(".", 1)[-1].startswith("_"):
                second.add(f"{module}.{name}")
    assert second == set()
