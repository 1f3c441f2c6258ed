from __future__ import annotations

import subprocess
import sys

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


def test_import_is_light() -> None:
    heavy = ["torch", "tensorflow", "numpy", "PIL", "boto3", "s3fs", "gcsfs", "ray", "dask"]
    code = f"import sys, shardkit; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_build_function_and_builder_modules_do_not_shadow_each_other() -> None:
    import shardkit.builder.worker as worker

    assert callable(shardkit.build)
    assert worker.__name__ == "shardkit.builder.worker"


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
