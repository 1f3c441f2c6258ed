"""``stats``: samples, bytes, per-shard and per-class counts, field kinds, size spread.

Tar shards are scanned header by header (seeking over member data where the shard is a
local uncompressed file); only the label field's data is read, and with
``image_sizes=True`` the image's (for its header). TFRecord shards are read and their
Examples decoded (``image/width`` and ``image/height`` give image sizes). ``label`` is a
field spec (:mod:`shardkit.tools.tsv`): ``cls`` by default (or the TFRecord schema's
``image/class/label``), or ``json.label``...; None counts no classes. A label that a
manifest's ``class_to_idx`` names is counted under its class name. A label spec other
than the default that names no field of the first sample is a ConfigError. Audio and video
fields are read too (``media=True``, the default): each one's duration and rate (samples
per second, frames per second) come from its header (soundfile / PyAV, decoding nothing);
a field whose header does not read is counted as unreadable.
"""

from __future__ import annotations

import contextlib
import io
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..codecs import image_extension, image_size
from ..errors import DataError, escape_controls
from ..formats.tar import Grouping, TarScanner
from ..formats.tfschema import HEIGHT, WIDTH
from ._inputs import Inputs, ShardRef, as_refs, class_names, gzip_errors, open_shard
from ._media import media_info, media_kind
from ._settings import ToolOptions, ToolRun
from .tsv import check_spec, label_text

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "MediaStats",
    "ShardStats",
    "Stats",
    "field_kind",
    "format_stats",
    "plot_stats",
    "stats",
    "stats_figure",
]

_KINDS = {
    **dict.fromkeys(("cls", "cls2", "class", "count", "index", "inx", "id"), "int"),
    **dict.fromkeys(("txt", "text", "transcript"), "text"),
    **dict.fromkeys(("json", "jsn"), "json"),
    **dict.fromkeys(("pyd", "pickle", "pkl"), "pickle"),
    **dict.fromkeys(("npy", "npz", "ten", "tb", "tenbin"), "array"),
    "pth": "torch",
    "gz": "gzip",
}


def field_kind(ext: str, value: Any = b"") -> str:
    """The kind of a field, by its extension (bytes) or its value (TFRecord features)."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        return "float" if isinstance(value, float) else type(value).__name__
    if image_extension(ext):
        return "image"
    return _KINDS.get(ext.rsplit(".", 1)[-1], "bytes")


@dataclass
class ShardStats:
    """What :func:`stats` measured of one shard, filled in as it is scanned: its samples
    and their ``bytes`` as stored in the archive (tar headers and padding, or TFRecord
    framing; uncompressed; the end-of-archive blocks left out), the sum of its entries in
    :attr:`Stats.sizes`. Not the shard record
    (:class:`~shardkit.formats.record.ShardRecord`), whose ``bytes`` are the file's size
    (gzip included) and which has a digest: the same names would mean two sizes."""

    url: str
    samples: int = 0
    bytes: int = 0


@dataclass
class MediaStats:
    """The audio or video fields of one name: each readable one's duration (seconds),
    how many had each rate (Hz for audio, frames per second for video), and how many had
    a header that does not read."""

    kind: str
    durations: list[float] = field(default_factory=list)
    rates: Counter[float] = field(default_factory=Counter)
    unreadable: int = 0

    def to_dict(self) -> dict[str, Any]:
        durations = self.durations
        return {
            "kind": self.kind,
            "duration_total": sum(durations),
            "duration_min": min(durations, default=None),
            "duration_mean": statistics.fmean(durations) if durations else None,
            "duration_max": max(durations, default=None),
            "rates": {_rate_text(r): n for r, n in self.rates.most_common()},
            "unreadable": self.unreadable,
        }


def _rate_text(rate: float) -> str:
    return f"{rate:g}"


@dataclass
class Stats:
    """What :func:`stats` found.

    ``sizes`` holds each sample's bytes in its shard (tar headers and padding, or TFRecord
    framing, included), in order; ``field_bytes`` the data bytes of each field in total.
    """

    shards: list[ShardStats] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    fields: Counter[str] = field(default_factory=Counter)
    field_bytes: Counter[str] = field(default_factory=Counter)
    kinds: dict[str, str] = field(default_factory=dict)
    classes: Counter[str] = field(default_factory=Counter)
    image_sizes: list[tuple[int, int]] = field(default_factory=list)  # (width, height)
    media: dict[str, MediaStats] = field(default_factory=dict)  # audio/video fields by name

    @property
    def samples(self) -> int:
        return len(self.sizes)

    @property
    def bytes(self) -> int:
        return sum(self.sizes)

    def size_summary(self) -> dict[str, float]:
        """min, mean, p50, p90, p99 and max of the sample sizes (bytes)."""
        if not self.sizes:
            return {}
        ordered = sorted(self.sizes)

        def pct(p: float) -> float:
            return float(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))])

        return {
            "min": float(ordered[0]),
            "mean": statistics.fmean(ordered),
            "p50": pct(50),
            "p90": pct(90),
            "p99": pct(99),
            "max": float(ordered[-1]),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "bytes": self.bytes,
            "shards": [vars(s) for s in self.shards],
            "sample_size": self.size_summary(),
            "fields": {
                name: {"kind": self.kinds[name], "samples": n, "bytes": self.field_bytes[name]}
                for name, n in self.fields.items()
            },
            "classes": dict(self.classes.most_common()),
            "media": {name: m.to_dict() for name, m in sorted(self.media.items())},
        }


@dataclass
class _Collector:
    result: Stats
    label: str | None
    names: dict[str, str]
    image_sizes: bool
    media: bool

    def __post_init__(self) -> None:
        self.want = self.label.split(".", 1)[0].lower() if self.label else None

    def sample(
        self, shard: ShardStats, fields: dict[str, Any], sizes: dict[str, int], disk: int
    ) -> None:
        """One sample: its fields (values read, or b""), data sizes and bytes on disk."""
        if not self.result.sizes and self.label is not None:
            check_spec(fields, self.label, "--label")
        shard.samples += 1
        shard.bytes += disk
        self.result.sizes.append(disk)
        for name, value in fields.items():
            self.result.kinds.setdefault(name, field_kind(name, value))
        self.result.fields.update(sizes.keys())
        self.result.field_bytes.update(sizes)
        if self.label is not None:
            text = label_text(fields, self.label, self.names)
            if text:
                self.result.classes[text] += 1
        if self.image_sizes:
            self._image_size(fields)
        if self.media:
            self._media(fields)

    def _media(self, fields: dict[str, Any]) -> None:
        for name, value in fields.items():
            kind = media_kind(name)
            if kind is None or not isinstance(value, bytes):
                continue
            seen = self.result.media.setdefault(name, MediaStats(kind))
            try:
                info = media_info(name, value)
            except DataError:
                seen.unreadable += 1
                continue
            if info is not None and info.duration is not None:
                seen.durations.append(info.duration)
            if info is not None and info.rate is not None:
                seen.rates[info.rate] += 1

    def _image_size(self, fields: dict[str, Any]) -> None:
        width, height = fields.get(WIDTH), fields.get(HEIGHT)
        if isinstance(width, int) and isinstance(height, int):
            self.result.image_sizes.append((width, height))
            return
        data = next((v for k, v in fields.items() if image_extension(k) and v), None)
        if isinstance(data, bytes):
            with contextlib.suppress(DataError):  # an unreadable image has no size to count
                self.result.image_sizes.append(image_size(data))

    def wants(self, ext: str) -> bool:
        if self.image_sizes and image_extension(ext):
            return True
        if self.media and media_kind(ext) is not None:
            return True
        return self.want is not None and (ext == self.want or self.label == ext)


def _tar_shard(ref: ShardRef, shard: ShardStats, collect: _Collector) -> None:
    seekable = not ref.gzip and not ref.stdin
    raw, stream = open_shard(ref, buffer_size=0 if seekable else 1 << 20)
    seekable = seekable and stream is raw
    try:
        members = TarScanner(stream, url=ref.url, chunk_size=1 << 16, seek=seekable)
        key: str | None = None
        fields: dict[str, Any] = {}
        sizes: dict[str, int] = {}
        disk = 0
        with gzip_errors(ref.url):
            for member, prefix, ext, new in Grouping(ref.url)(members):
                if new:
                    if key is not None:
                        collect.sample(shard, fields, sizes, disk)
                    key, fields, sizes, disk = prefix, {}, {}, 0
                sizes[ext] = member.size
                disk += member.end - member.start
                fields[ext] = members.read_data() if collect.wants(ext) else b""
        if key is not None:
            collect.sample(shard, fields, sizes, disk)
    finally:
        if not ref.stdin:
            raw.close()


def _tfrecord_shard(ref: ShardRef, shard: ShardStats, collect: _Collector) -> None:
    from ..formats.example import decode_example, example_to_sample
    from ..formats.tfrecord import RECORD_OVERHEAD, iter_records

    raw, stream = open_shard(ref)
    try:
        with gzip_errors(ref.url):
            for offset, record in iter_records(stream, url=ref.url):
                features = decode_example(record, url=ref.url, offset=offset)
                sample = example_to_sample(features, key="", url=None)
                fields = {k: v for k, v in sample.items() if not k.startswith("__")}
                sizes = {k: _value_size(v) for k, v in fields.items()}
                collect.sample(shard, fields, sizes, len(record) + RECORD_OVERHEAD)
    finally:
        raw.close()


def _value_size(value: Any) -> int:
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, list):
        return sum(len(v) if isinstance(v, bytes) else 8 for v in value)
    return 8


def stats(
    inputs: Inputs,
    *,
    label: str | None = "cls",
    image_sizes: bool = False,
    media: bool = True,
    on_shard: Callable[[ShardStats], None] | None = None,
    **options: Unpack[ToolOptions],
) -> Stats:
    """Gather statistics over ``inputs`` (shards, folders, manifests, ``-``).

    ``image_sizes`` also collects each sample's image width and height (reading image
    headers from tar shards), for :func:`plot_stats`. ``media`` reads each audio and video
    field's duration and rate from its header (:attr:`Stats.media`). ``progress`` hears of
    each shard done (:class:`~shardkit.tools._progress.ToolProgress`); ``storage_options``
    and ``progress``: :class:`~shardkit.tools._settings.ToolOptions`.
    """
    run = ToolRun.of("stats", options, writes=False)
    result = Stats()
    refs = as_refs(inputs, run.access)
    names = class_names(refs) if label else {}
    collect = _Collector(result, label, names, image_sizes, media)
    for ref in run.track(refs):
        shard = ShardStats(ref.url)
        if ref.format == "tar":
            _tar_shard(ref, shard, collect)
        else:
            _tfrecord_shard(ref, shard, collect)
        result.shards.append(shard)
        if on_shard is not None:
            on_shard(shard)
    return result


def format_stats(result: Stats, *, top: int = 20) -> str:
    """A readable report of ``result``."""
    from ..units import format_size

    lines = [
        f"shards   {len(result.shards)}",
        f"samples  {result.samples}",
        f"bytes    {format_size(result.bytes)}",
    ]
    summary = result.size_summary()
    if summary:
        spread = "  ".join(f"{k} {format_size(v)}" for k, v in summary.items())
        lines.append(f"sample size  {spread}")
    if result.fields:
        lines.append("fields")
        width = max(len(name) for name in result.fields)
        for name, n in sorted(result.fields.items()):
            mean = format_size(result.field_bytes[name] / n)
            kind = result.kinds.get(name, "?")
            shown = escape_controls(name)
            lines.append(f"  {shown:<{width}}  {kind:<6}  in {n} samples  mean {mean}")
    if result.media:
        lines.append("media")
        width = max(len(name) for name in result.media)
        for name, seen in sorted(result.media.items()):
            lines.append(f"  {escape_controls(name):<{width}}  {_media_line(seen)}")
    if result.classes:
        lines.append(f"classes  {len(result.classes)}")
        for name, n in result.classes.most_common(top):
            lines.append(f"  {escape_controls(name)}\t{n}")
        if len(result.classes) > top:
            lines.append(f"  ... and {len(result.classes) - top} more")
    lines.append("per shard")
    lines += [
        f"  {escape_controls(s.url)}\t{s.samples}\t{format_size(s.bytes)}" for s in result.shards
    ]
    return "\n".join(lines)


def _media_line(seen: MediaStats) -> str:
    durations = seen.durations
    parts = [f"{seen.kind:<5}"]
    if durations:
        parts.append(
            f"{len(durations)} timed  total {_seconds(sum(durations))}  "
            f"min {min(durations):.2f}s  mean {statistics.fmean(durations):.2f}s  "
            f"max {max(durations):.2f}s"
        )
    unit = "Hz" if seen.kind == "audio" else "fps"
    rates = ", ".join(f"{_rate_text(r)} {unit} ({n})" for r, n in seen.rates.most_common(5))
    if rates:
        parts.append(f"rate {rates}")
    if seen.unreadable:
        parts.append(f"{seen.unreadable} unreadable")
    return "  ".join(parts)


def _seconds(total: float) -> str:
    minutes, seconds = divmod(total, 60)
    hours, minutes = divmod(int(minutes), 60)
    if hours:
        return f"{hours}h{minutes:02d}m{seconds:04.1f}s"
    return f"{minutes}m{seconds:04.1f}s" if minutes else f"{seconds:.2f}s"


def plot_stats(result: Stats, output: str, *, top: int = 50) -> None:
    """Histograms of sample sizes, image widths and heights (when ``result`` has them)
    and per-class counts, side by side in a PNG (matplotlib, Agg): :func:`stats_figure`."""
    from .. import storage

    png = io.BytesIO()
    stats_figure(result, top=top).savefig(png, format="png")
    with storage.open_atomic(output) as file:  # an error while writing names the file
        file.write(png.getbuffer())


def stats_figure(result: Stats, *, top: int = 50) -> Any:
    """The matplotlib ``Figure`` :func:`plot_stats` draws: every axis named, with its unit."""
    from .._optional import require

    matplotlib = require("matplotlib", "stats --plot")

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import StrMethodFormatter

    panels = 1 + bool(result.image_sizes) + bool(result.classes)
    figure = Figure(figsize=(6 * panels, 4), dpi=100, layout="constrained")
    axes = list(figure.subplots(1, panels, squeeze=False)[0])
    count = StrMethodFormatter("{x:,.0f}")
    sizes = axes.pop(0)
    sizes.hist([s / 1000 for s in result.sizes] or [0], bins=50, color="#4477aa")
    sizes.set(
        title=f"sample size ({result.samples:,} samples)",
        xlabel="bytes in the shard per sample, headers included (kB)",
        ylabel="samples (count)",
    )
    sizes.yaxis.set_major_formatter(count)
    if result.image_sizes:
        dims = axes.pop(0)
        widths, heights = zip(*result.image_sizes, strict=True)
        dims.hist(
            [widths, heights], bins=40, label=["width", "height"], color=["#228833", "#ccbb44"]
        )
        dims.set(
            title=f"image size ({len(widths):,} images)",
            xlabel="width and height (pixels)",
            ylabel="images (count)",
        )
        dims.yaxis.set_major_formatter(count)
        dims.legend()
    if result.classes:
        names, counts = zip(*result.classes.most_common(top), strict=True)
        bars = axes.pop(0)
        bars.bar(range(len(names)), counts, color="#cc6677")
        bars.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
        shown = (
            f"top {len(names)} of {len(result.classes)}"
            if len(names) < len(result.classes)
            else f"{len(names)}"
        )
        bars.set(title=f"samples per class ({shown})", xlabel="class", ylabel="samples (count)")
        bars.yaxis.set_major_formatter(count)
    return figure
