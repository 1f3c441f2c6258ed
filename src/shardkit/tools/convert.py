"""``convert``: tar <-> TFRecord, keeping keys, labels and every field.

Both directions follow the shardkit TFRecord schema (:mod:`shardkit.formats.tfschema`),
the same layout ``build --format tfrecord`` writes. tar -> TFRecord: the image field
(``jpg``, ``png``, ...) becomes ``image/encoded`` with ``image/format``, ``image/height``
and ``image/width``; ``cls`` becomes the int64 ``image/class/label``; ``json``'s
``"path"`` and ``"class"`` are copied to ``image/filename`` and ``image/class/text``;
every other field (``json`` included) becomes a one-value bytes feature of the same name
holding the field's bytes as they are; ``__key__`` a bytes feature. TFRecord -> tar maps
all of that back, so tar -> TFRecord -> tar returns every field exactly (the order of the
fields in a sample becomes sorted by name, as Examples keep no order). Features that
TensorFlow wrote natively map as :func:`shardkit.tools._outputs.tar_fields` says: int64
-> ASCII decimal, float -> ``repr``, several values -> a JSON array, ``/`` in a name ->
``.``. Records without a ``__key__`` feature get their record number in their shard as
key (``00000012``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import storage
from ..errors import ConfigError
from ..formats.cut import WRITER_MAX_COUNT, WRITER_MAX_SIZE
from ..formats.names import FORMATS, Format, is_pattern, shard_name_format
from ..formats.record import ShardInfo
from ..formats.tfschema import to_example_fields
from ..units import Size
from ._inputs import Inputs, as_refs, iter_samples
from ._outputs import Output
from ._settings import ToolRun, WriteOptions

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["convert"]


def _target(output: str, to: Format | None) -> Format:
    implied = shard_name_format(storage.basename(output))
    if to is None:
        if implied is None:
            raise ConfigError(f"cannot tell the output format from {output!r}: give --to")
        return implied
    if to not in FORMATS:
        raise ConfigError(f"--to must be tar or tfrecord, not {to!r}")
    if implied is not None and implied != to:
        raise ConfigError(f"output {output!r} is named like {implied}, but --to is {to}")
    return to


def convert(
    inputs: Inputs,
    output: str,
    *,
    to: Format | None = None,
    max_count: int | None = None,
    max_size: Size | None = None,
    **options: Unpack[WriteOptions],
) -> tuple[int, list[ShardInfo]]:
    """Convert the samples of ``inputs`` to ``to`` (default: the output's extension),
    written to a file, ``-`` or a shard pattern; returns (samples, shards written).
    ``on_shard`` gets each file written (its size and ``hash`` digest); the keywords:
    :class:`~shardkit.tools._settings.WriteOptions`."""
    run = ToolRun.of("convert", options)
    target = _target(output, to) if output != "-" else (to or "tar")
    refs = as_refs(inputs, run.access)
    rotation: dict[str, Any] = {}
    if is_pattern(output):
        rotation = {"max_count": max_count, "max_size": max_size}
        if max_count is None and max_size is None:  # ShardWriter's defaults
            rotation = {"max_count": WRITER_MAX_COUNT, "max_size": WRITER_MAX_SIZE}
    elif max_count is not None or max_size is not None:
        raise ConfigError("--max-count/--max-size need an output shard pattern")
    with Output(output, run, format=target, **rotation) as out:
        for ref in run.track(refs):
            to_schema = ref.format == "tar" and target == "tfrecord"
            for sample in iter_samples([ref]):
                out.write(to_example_fields(sample) if to_schema else sample)
    return out.samples, out.shards
