from __future__ import annotations

import inspect
import io
import os
import types
from collections.abc import Iterator

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class _MonkeyPatch(pytest.MonkeyPatch):
    """pytest's ``monkeypatch`` whose environment changes reach the budget, which reads each
    ``SHARDKIT_MAX_<KIND>`` once (``shardkit.budget.reset`` makes it read them again)."""

    def setenv(self, name: str, value: str, prepend: str | None = None) -> None:
        super().setenv(name, value, prepend)
        _reset_budget()

    def delenv(self, name: str, raising: bool = True) -> None:
        super().delenv(name, raising)
        _reset_budget()

    def undo(self) -> None:
        super().undo()
        _reset_budget()


def _reset_budget() -> None:
    from shardkit import budget

    budget.reset()


@pytest.fixture
def monkeypatch() -> Iterator[pytest.MonkeyPatch]:
    """Overrides pytest's: the same, but a ``SHARDKIT_MAX_<KIND>`` set or removed takes
    effect at once, as it did when the budget read the environment at every check."""
    patch = _MonkeyPatch()
    yield patch
    patch.undo()


@pytest.fixture(autouse=True)
def _environment_kept() -> Iterator[None]:
    """Each test leaves ``os.environ`` as it found it: Lightning's ``ddp_spawn`` writes
    ``MASTER_ADDR`` / ``MASTER_PORT`` into the test process, and a later test's DataLoader
    workers then (rightly) refuse to guess their rank. The folders made that test run
    before the remote ones."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
        _reset_budget()


class NonSeekable(io.RawIOBase):
    """A stream that only reads, in short chunks, like a pipe or an HTTP body."""

    def __init__(self, data: bytes, chunk: int = 3000) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._chunk = chunk

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self._chunk, len(self._data) - self._pos)
        buffer[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


@pytest.fixture
def nonseekable() -> type[NonSeekable]:
    return NonSeekable


@pytest.fixture
def image_folder(tmp_path: os.PathLike[str]) -> Iterator[str]:
    from shardkit.demo import make_image_folder

    folder = os.path.join(str(tmp_path), "images")
    make_image_folder(folder, count=30)
    yield folder


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> types.ModuleType:
    """``datasets`` with no network and its caches under ``tmp_path``."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", os.path.join(tmp_path, "hf"))
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    return datasets


# --------------------------------------------------------------------------- markers

#: The helpers (and fixtures) that reach a server started outside the test run:
#: scripts/test-services (nginx, SeaweedFS S3, fake GCS), scripts/cluster-services (Ray,
#: Dask), or `make system-deps` (Chromium for the viewer's browser tests).
SERVICES = frozenset(
    {
        "http_service",
        "s3_options",
        "gcs_options",
        "s3_bucket",
        "ray_address",
        "dask_address",
        "_chromium",
    }
)


TESTS = os.path.dirname(os.path.abspath(__file__))


def _names(code: types.CodeType) -> set[str]:
    """The global names ``code`` uses, its nested functions' and lambdas' included."""
    found = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= _names(const)
    return found


def service_reason(func: object, fixtures: dict[str, object], params: dict[str, object]) -> str:
    """Why a test needs a service ('' when it does not): it calls one of :data:`SERVICES`,
    directly, through a function of its module, or through a fixture it uses (followed
    the same way); ``address_of(engine)`` counts unless ``engine`` is ``"local"``."""
    named = set(fixtures) & SERVICES
    if named:
        return f"uses the fixture {sorted(named)[0]}"
    seen: set[int] = set()
    todo = [func, *fixtures.values()]
    while todo:
        fn = inspect.unwrap(todo.pop())  # type: ignore[arg-type]
        code = getattr(fn, "__code__", None)
        if code is None or id(code) in seen or not code.co_filename.startswith(TESTS):
            continue  # the library's own functions reach no test service
        seen.add(id(code))
        names = _names(code)
        hit = names & SERVICES
        if hit:
            return f"uses {sorted(hit)[0]}"
        if "address_of" in names and params.get("engine", "ray") != "local":
            return "uses a cluster (address_of)"
        scope = getattr(fn, "__globals__", {})
        names.discard("address_of")  # judged by its engine above, not by what it may call
        todo.extend(scope[n] for n in names if inspect.isfunction(scope.get(n)))
    return ""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``service`` every test that needs a server (see :func:`service_reason`), so
    ``-m "not service"`` (``make quick``) runs without any."""
    for item in items:
        func = getattr(item, "function", None)
        info = getattr(item, "_fixtureinfo", None)
        if func is None or info is None:
            continue
        fixtures = {name: defs[-1].func for name, defs in info.name2fixturedefs.items() if defs}
        params = getattr(getattr(item, "callspec", None), "params", {})
        if service_reason(func, fixtures, params):
            item.add_marker(pytest.mark.service)
