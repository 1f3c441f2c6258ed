"""The viewer's HTTP server: the standard library's ``ThreadingHTTPServer``, read-only.

Routes (``GET`` and ``HEAD`` only; anything else is 404 or 405)::

    /                          the grid: ?page=N&size=N&q=KEY-SUBSTRING&cls=CLASS
    /sample/I                  sample I: every field
    /sample/I/field/F          field F (by position) of sample I, as its content type
    /thumb/I, /thumb/I/F       a JPEG thumbnail of sample I's first image, video or audio
                               field (or field F): a video's first frame, a waveform
    /stats                     class histogram, fields, sizes
    /style.css                 the one stylesheet

No URL holds a file path: samples and fields are numbers, so nothing outside the source
can be asked for. Every answer, errors included (400, 404, 405, 409, 421, 422, 500, 501,
503), carries ``X-Content-Type-Options: nosniff``, a Content-Security-Policy that allows
no script at all (``default-src 'none'``), and ``Cross-Origin-Resource-Policy:
same-origin``; field bytes are also sandboxed. When the server listens on a loopback
address, a request whose ``Host`` is not that address (or ``localhost``, ``127.0.0.1``,
``[::1]``) with its port is refused (a web page cannot reach it by a DNS name that
resolves to 127.0.0.1). IPv6 addresses listen on an IPv6 socket.

Thumbnails decode under :class:`~shardkit.tools.view._budget.DecodeBudget`: a bounded
number at once, holding a bounded number of bytes of pixels together (sized from the
picture's header before decoding); a request that waits too long is answered 503 with
``Retry-After``, a picture over the pixel limit or the whole budget 422. A request the
browser cancels (the connection closes under the answer) is logged at debug level only.

Connections are served by at most ``connections`` threads at once: a further one waits
(in the listening socket's queue) for a thread to finish, and is answered 503 with
``Retry-After`` after ``connection_wait`` seconds. A connection idle for :data:`IDLE`
seconds (a request not sent, an answer not read) is closed, so a slow client holds its
thread for a bounded time.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import logging
import re
import socket
import sys
import threading
import time
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ...errors import ConfigError, DataError, MissingDependencyError, ShardkitError
from ...storage import LOCAL, Access
from .._media import PixelLimitError, Reserve, field_picture, thumbnail_kind
from ._budget import Busy, DecodeBudget, OverBudget
from ._catalog import Catalog, ShardChangedError
from ._media import DOWNLOAD, content_type, media_kind
from ._pages import error_page, grid_page, sample_page, stats_page

__all__ = ["CSP", "Viewer"]

log = logging.getLogger(__name__)

CSP = (
    "default-src 'none'; img-src 'self'; media-src 'self'; style-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": CSP,
    "Cross-Origin-Resource-Policy": "same-origin",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_NUMBER = r"(\d{1,12})"
_ROUTES = {
    "grid": re.compile(r"/"),
    "stats": re.compile(r"/stats"),
    "style": re.compile(r"/style\.css"),
    "sample": re.compile(rf"/sample/{_NUMBER}"),
    "field": re.compile(rf"/sample/{_NUMBER}/field/{_NUMBER}"),
    "thumb": re.compile(rf"/thumb/{_NUMBER}(?:/{_NUMBER})?"),
}
_MAX_PAGE = 500  # samples per page at most
THUMB = 160  # pixels, the longer side of a thumbnail
DECODE_MEMORY = 1 << 30  # bytes of pixels all decodes at once may hold
DECODES = 4  # decodes at once, at most
DECODE_WAIT = 60.0  # seconds a thumbnail waits for its decode before a 503
CONNECTIONS = 32  # connections served at once (a thread each), at most
CONNECTION_WAIT = 10.0  # seconds a connection waits for a thread before a 503
IDLE = 30.0  # seconds a connection may send or read nothing before it is closed
_RETRY_AFTER = "5"  # seconds, in a 503
_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)  # a cancelled request
STYLE = b"""
body { font: 14px system-ui, sans-serif; margin: 0 1em 2em; color: #222; background: #fff; }
nav { padding: .5em 0; border-bottom: 1px solid #ddd; margin-bottom: .5em; }
nav a { margin-right: 1em; } nav span { color: #777; }
h1 { font-size: 1.2em; overflow-wrap: anywhere; }
.note { background: #fff6d5; padding: .4em; }
.grid { display: flex; flex-wrap: wrap; gap: 8px; }
.tile { width: 170px; text-decoration: none; color: #222; border: 1px solid #ddd; padding: 4px; }
.tile img, .placeholder { display: block; width: 160px; height: 160px; object-fit: contain;
  background: #f3f3f3; }
.placeholder { line-height: 160px; text-align: center; color: #777; }
.key { display: block; font-size: 12px; overflow-wrap: anywhere; }
table { border-collapse: collapse; } td, th { border: 1px solid #ddd; padding: 4px 6px;
  vertical-align: top; text-align: left; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; max-height: 30em; overflow: auto;
  margin: 0; }
img.full { max-width: 640px; max-height: 480px; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 1em; }
dd { margin: 0; overflow-wrap: anywhere; }
progress { width: 300px; }
"""


class Viewer:
    """A read-only web viewer of ``source`` (anything :class:`shardkit.Dataset` takes).

    ``port=0`` picks a free port; :attr:`url` is where it listens. Run it with
    :meth:`serve_forever` (blocks) or :meth:`start` (a daemon thread); :meth:`close`
    stops it. ``page_size`` is the grid's default samples per page; ``label`` the field
    spec the class filter and the histogram use (None: no classes). ``decode_memory``,
    ``decodes`` and ``decode_wait`` are the thumbnails' budget (:attr:`decoding`): bytes
    of pixels held at once, decodes at once, seconds a request waits for its turn;
    ``connections`` the connections served at once (a thread each), ``connection_wait``
    the seconds a further one waits for its turn before it is answered 503.
    """

    def __init__(
        self,
        source: str | Sequence[str],
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
        page_size: int = 48,
        label: str | None = "cls",
        access: Access = LOCAL,
        decode_memory: int = DECODE_MEMORY,
        decodes: int = DECODES,
        decode_wait: float = DECODE_WAIT,
        connections: int = CONNECTIONS,
        connection_wait: float = CONNECTION_WAIT,
    ) -> None:
        if not 1 <= page_size <= _MAX_PAGE:
            raise ConfigError(f"page_size must be from 1 to {_MAX_PAGE}, not {page_size}")
        if connections < 1 or not connection_wait >= 0:
            raise ConfigError(
                f"connections must be 1 or more and connection_wait 0 or more, not "
                f"{connections} and {connection_wait}"
            )
        self.decoding = DecodeBudget(decode_memory, slots=decodes, wait=decode_wait)
        self.catalog = Catalog(source, label=label, access=access)
        self.page_size = page_size
        host = host.removeprefix("[").removesuffix("]")
        try:
            self._server = _Server((host, port), self, connections, connection_wait)
        except OSError as exc:
            self.catalog.close()
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        self._thread: threading.Thread | None = None
        bound_host, bound_port = self._server.server_address[:2]
        self.host, self.port = str(bound_host), int(bound_port)
        self.loopback = _is_loopback(self.host)

    @property
    def url(self) -> str:
        """The address to open in a browser."""
        return f"http://{self.authority}/"

    @property
    def authority(self) -> str:
        """``host:port`` as a ``Host`` header names it (an IPv6 address in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def serve_forever(self) -> None:
        """Answer requests until :meth:`close` (from another thread) or an interrupt."""
        self._server.serve_forever(poll_interval=0.2)

    def start(self) -> Viewer:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and close the shards."""
        self._server.closing.set()  # a connection waiting for a thread stops waiting
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
        self.catalog.close()

    def __enter__(self) -> Viewer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Server(ThreadingHTTPServer):
    """A thread per connection, ``connections`` at most (a further one waits up to ``wait``
    seconds, then is answered 503), on an IPv6 socket for an IPv6 address; a connection
    the client closed under its answer, or left idle, is not an error."""

    daemon_threads = True
    request_queue_size = 64  # connections the kernel holds while every thread is busy

    def __init__(
        self, address: tuple[str, int], viewer: Viewer, connections: int, wait: float
    ) -> None:
        self.viewer = viewer
        self.closing = threading.Event()
        self._slots = threading.BoundedSemaphore(connections)
        self._wait = wait
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Start the connection's thread once a slot is free (the accept loop waits, so
        no thread is made for a connection that cannot be served yet)."""
        deadline = time.monotonic() + self._wait
        while not self._slots.acquire(timeout=min(0.2, max(0.0, deadline - time.monotonic()))):
            if self.closing.is_set() or time.monotonic() >= deadline:
                self._busy(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _busy(self, request: socket.socket) -> None:
        """Answer 503 without a thread: the request read so far is drained (so that
        closing sends no reset that could lose the answer), never waited for."""
        body, kind = _error(503, "too many connections at once: try again")
        fields = {**_HEADERS, "Retry-After": _RETRY_AFTER, "Content-Type": kind}
        fields |= {"Content-Length": str(len(body)), "Connection": "close"}
        head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
        try:
            request.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                request.recv(1 << 16)
            request.settimeout(1.0)
            request.sendall(f"HTTP/1.0 503 Service Unavailable\r\n{head}\r\n".encode() + body)
        except OSError as exc:
            log.debug("answering a connection 503 failed: %s", exc)
        self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (*_GONE, TimeoutError)):
            log.debug("%s closed the connection or left it idle: %s", client_address, exc)
        else:
            log.error("answering %s failed", client_address, exc_info=True)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _Handler(BaseHTTPRequestHandler):
    server_version = "shardkit-view"
    sys_version = ""
    timeout = IDLE  # the socket's: a slow client holds its thread this long at most

    @property
    def viewer(self) -> Viewer:
        return self.server.viewer  # type: ignore[attr-defined, no-any-return]

    def log_message(self, format: str, *args: Any) -> None:  # the library never prints
        log.debug("%s " + format, self.address_string(), *args)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def do_GET(self) -> None:
        self._answer(head=False)

    def _not_allowed(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, *_error(405, "the viewer is read-only"))

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def _answer(self, *, head: bool) -> None:
        try:
            status, body, kind, extra = self._route()
        except ShardChangedError as exc:
            log.warning("%s", exc)
            status, (body, kind), extra = 409, _error(409, str(exc)), {}
        except Busy as exc:
            status, (body, kind) = 503, _error(503, f"{exc}: try again")
            extra = {"Retry-After": _RETRY_AFTER}
        except ShardkitError as exc:
            log.warning("%s: %s", self.path, exc)
            status, (body, kind), extra = 500, _error(500, str(exc)), {}
        except _GONE:
            raise
        except Exception:  # a bug: logged with its traceback, answered with the headers
            log.exception("%s failed", self.path)
            status, (body, kind), extra = 500, _error(500, "internal error (see the log)"), {}
        self._send(status, body, kind, extra, head=head)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own errors (a bad request line, an unknown method, a
        header too long) sent with the viewer's headers, like every other answer."""
        self.close_connection = True
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        body, kind = _error(code, message or phrase)
        self._send(code, body, kind, {"Connection": "close"}, head=self.command == "HEAD")

    def _route(self) -> tuple[int, bytes | memoryview, str, dict[str, str]]:
        if not self._host_allowed():
            return (421, *_error(421, "unexpected Host header"), {})
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        for name, pattern in _ROUTES.items():
            match = pattern.fullmatch(parts.path)
            if match:
                numbers = [int(g) for g in match.groups() if g is not None]
                return getattr(self, f"_{name}")(*numbers, query=query)  # type: ignore[no-any-return]
        return (404, *_error(404, "no such page"), {})

    def _host_allowed(self) -> bool:
        if not self.viewer.loopback:
            return True
        host = self.headers.get("Host", "")
        port = self.viewer.port
        names = {f"{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]")}
        return host in names or host == self.viewer.authority

    def _send(
        self,
        status: int,
        body: bytes | bytearray | memoryview,
        kind: str,
        extra: dict[str, str] | None = None,
        *,
        head: bool = False,
    ) -> None:
        self.send_response(status)
        for name, value in {**_HEADERS, **(extra or {}), "Content-Type": kind}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    # ------------------------------------------------------------------ routes

    def _grid(self, *, query: dict[str, str]) -> tuple[int, bytes, str, dict[str, str]]:
        viewer = self.viewer
        number = _int(query.get("page"), 1, 1, 10**12) - 1
        size = _int(query.get("size"), viewer.page_size, 1, _MAX_PAGE)
        key, label = query.get("q", ""), query.get("cls", "")
        page = viewer.catalog.page(number, size, key=key, label=label)
        return 200, grid_page(viewer.catalog, page, number, size, key, label), _HTML, {}

    def _sample(
        self, index: int, *, query: dict[str, str]
    ) -> tuple[int, bytes, str, dict[str, str]]:
        entry = self.viewer.catalog.sample(index)
        if entry is None:
            return (404, *_error(404, f"no sample {index}"), {})
        return 200, sample_page(self.viewer.catalog, entry), _HTML, {}

    def _field(
        self, index: int, number: int, *, query: dict[str, str]
    ) -> tuple[int, bytes | bytearray | memoryview, str, dict[str, str]]:
        entry = self.viewer.catalog.sample(index)
        fields = list(entry.fields.items()) if entry is not None else []
        if not 0 <= number < len(fields):
            return (404, *_error(404, f"no field {number} in sample {index}"), {})
        name, value = fields[number]
        data = (  # a view of a mapped shard is sent as it lies, not copied first
            value if isinstance(value, (bytes, bytearray, memoryview)) else repr(value).encode()
        )
        kind = content_type(name) if isinstance(value, (bytes, bytearray, memoryview)) else _PLAIN
        extra = {"Content-Security-Policy": CSP + "; sandbox"}
        if kind == DOWNLOAD:
            extra["Content-Disposition"] = f'attachment; filename="sample-{index}-field-{number}"'
        return 200, data, kind, extra

    def _thumb(
        self, index: int, number: int | None = None, *, query: dict[str, str]
    ) -> tuple[int, bytes, str, dict[str, str]]:
        entry = self.viewer.catalog.sample(index)
        fields = list(entry.fields.items()) if entry is not None else []
        if number is None:
            number = next((i for i, (n, _) in enumerate(fields) if thumbnail_kind(n)), -1)
        if not 0 <= number < len(fields) or not thumbnail_kind(fields[number][0]):
            return (404, *_error(404, f"no picture in sample {index}"), {})
        name, value = fields[number]
        if not isinstance(value, (bytes, bytearray, memoryview)):
            return (404, *_error(404, f"no picture in sample {index}"), {})
        try:
            picture = thumbnail(name, value, reserve=self.viewer.decoding.reserve)
        except (PixelLimitError, OverBudget) as exc:
            return (422, *_error(422, f"no thumbnail: {exc}"), {})
        if picture is None:
            if media_kind(name, native=True) != "image":
                return (415, *_error(415, "this field does not decode"), {})
            return 200, bytes(value), content_type(name), {}  # the browser scales it
        return 200, picture, "image/jpeg", {}

    def _stats(self, *, query: dict[str, str]) -> tuple[int, bytes, str, dict[str, str]]:
        return 200, stats_page(self.viewer.catalog), _HTML, {}

    def _style(self, *, query: dict[str, str]) -> tuple[int, bytes, str, dict[str, str]]:
        return 200, STYLE, "text/css; charset=utf-8", {}


_HTML = "text/html; charset=utf-8"
_PLAIN = "text/plain; charset=utf-8"


def _error(status: int, message: str) -> tuple[bytes, str]:
    return error_page(status, message), _HTML


def _int(text: str | None, default: int, low: int, high: int) -> int:
    try:
        value = int(text) if text else default
    except ValueError:
        return default
    return min(high, max(low, value))


def thumbnail(
    name: str,
    data: bytes | bytearray | memoryview,
    side: int = THUMB,
    *,
    reserve: Reserve | None = None,
) -> bytes | None:
    """A JPEG of at most ``side`` pixels a side of field ``name`` (an image scaled, a
    video's first frame, an audio waveform: :func:`shardkit.tools._media.field_picture`,
    the helper ``show --grid`` draws with), or None when the field does not decode or an
    extra it needs is missing. A picture over the pixel limit is a PixelLimitError, one
    over the whole decode budget an OverBudget (``reserve``: the budget's)."""
    try:
        picture = field_picture(name, data, (side, side), reserve=reserve)
    except (PixelLimitError, OverBudget):
        raise
    except (DataError, MissingDependencyError):
        return None
    out = io.BytesIO()
    picture.save(out, format="JPEG", quality=85)
    return out.getvalue()
