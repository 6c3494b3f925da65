"""Tests for harness.datasets.download against a real HTTP server on 127.0.0.1 (ephemeral port)."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import random
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.datasets import download
from harness.datasets.download import RemoteFile, fetch, md5_of, mirror_dirs_from_env, sha256_of, verify
from harness.errors import DataError

DATA = random.Random(0).randbytes(200_000)
SHA = hashlib.sha256(DATA).hexdigest()
MD5 = hashlib.md5(DATA).hexdigest()
NAME = "squad/dev-v1.1.json"
T = 5.0  # every client timeout in these tests: nothing can hang for long


@dataclass
class ServerState:
    """What the handler serves and how it misbehaves; `log` records (path, Range header) per request."""

    files: dict[str, bytes] = field(default_factory=dict)
    cut_after: int | None = None  # close the connection after this many body bytes ...
    cut_times: int = 1  # ... on this many requests
    ignore_range: bool = False
    sleep: float = 0.0
    fail_first: int = 0  # answer 503 to this many requests first
    headers: dict[str, str] = field(default_factory=dict)  # extra response headers
    log: list[tuple[str, str | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


class Handler(http.server.BaseHTTPRequestHandler):
    state: ServerState  # set on a per-test subclass

    def log_message(self, *args: object) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        st = self.state
        rng = self.headers.get("Range")
        st.log.append((self.path, rng))
        if st.sleep:
            st.stop.wait(st.sleep)
        if st.fail_first > 0:
            st.fail_first -= 1
            self.send_error(503, "Service Unavailable")
            return
        body = st.files.get(self.path)
        if body is None:
            self.send_error(404, "Not Found")
            return
        start, status = 0, 200
        m = re.fullmatch(r"bytes=(\d+)-", rng or "")
        if m and not st.ignore_range:
            start = int(m.group(1))
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        payload = body[start:]
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        for key, value in st.headers.items():
            self.send_header(key, value)
        self.end_headers()
        if st.cut_after is not None and st.cut_times > 0:
            st.cut_times -= 1
            self.wfile.write(payload[: st.cut_after])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(payload)


@pytest.fixture
def server() -> Iterator[tuple[str, ServerState]]:
    state = ServerState(files={"/dev-v1.1.json": DATA})
    handler = type("TestHandler", (Handler,), {"state": state})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    finally:
        state.stop.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_DATA_MIRROR", raising=False)
    monkeypatch.delenv("HARNESS_OFFLINE", raising=False)
    monkeypatch.setattr(download, "_BACKOFF_S", 0.0)


def remote(base: str, path: str = "/dev-v1.1.json", **kw: object) -> RemoteFile:
    args: dict[str, object] = {"sha256": SHA, "size": len(DATA)}
    args.update(kw)
    return RemoteFile(name=NAME, url=base + path, **args)  # type: ignore[arg-type]


def count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = download._digests

    def counting(path: Path, algos: object) -> dict[str, str]:
        calls.append(1)
        return real(path, algos)  # type: ignore[arg-type]

    monkeypatch.setattr(download, "_digests", counting)
    return calls


# --------------------------------------------------------------------------------------- download


def test_download_success_verified_and_sidecar(server, tmp_path):
    base, state = server
    path = fetch(remote(base), cache_dir=tmp_path / "cache", timeout=T)
    assert path == tmp_path / "cache" / NAME
    assert path.read_bytes() == DATA
    assert not path.with_name(path.name + ".part").exists()
    rec = json.loads(path.with_name(path.name + ".verified").read_text())
    assert rec["sha256"] == SHA and rec["size"] == len(DATA) and rec["mtime_ns"] == path.stat().st_mtime_ns
    assert state.log == [("/dev-v1.1.json", None)]


def test_download_with_md5_only(server, tmp_path):
    base, _ = server
    path = fetch(remote(base, sha256=None, md5=MD5.upper()), cache_dir=tmp_path, timeout=T)
    assert md5_of(path) == MD5
    assert json.loads(path.with_name(path.name + ".verified").read_text())["md5"] == MD5


def test_resume_after_cut_sends_range(server, tmp_path):
    base, state = server
    state.cut_after = 50_000
    path = fetch(remote(base), cache_dir=tmp_path, timeout=T)
    assert sha256_of(path) == SHA
    assert len(state.log) == 2
    assert state.log[0][1] is None
    assert state.log[1][1] == "bytes=50000-"  # resumed from what was already on disk


def test_resume_of_part_left_by_earlier_run(server, tmp_path):
    base, state = server
    part = tmp_path / (NAME + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(DATA[:12_345])
    path = fetch(remote(base), cache_dir=tmp_path, timeout=T)
    assert path.read_bytes() == DATA
    assert state.log == [("/dev-v1.1.json", "bytes=12345-")]


def test_server_ignoring_range_restarts_from_zero(server, tmp_path):
    base, state = server
    state.cut_after = 50_000
    state.ignore_range = True
    path = fetch(remote(base), cache_dir=tmp_path, timeout=T)
    assert path.read_bytes() == DATA
    assert len(state.log) == 2 and state.log[1][1] is not None  # asked for a range, got 200, restarted


def test_stale_part_with_ignored_range_is_overwritten(server, tmp_path):
    base, state = server
    state.ignore_range = True
    part = tmp_path / (NAME + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(b"garbage" * 100)
    path = fetch(remote(base), cache_dir=tmp_path, timeout=T)
    assert path.read_bytes() == DATA


def test_repeated_cuts_fail_and_keep_part_not_final(server, tmp_path):
    base, state = server
    state.cut_after = 1_000
    state.cut_times = 100
    state.ignore_range = True  # no progress is ever made, so retries run out
    with pytest.raises(DataError) as err:
        fetch(remote(base), cache_dir=tmp_path, timeout=T, retries=2)
    msg = str(err.value)
    assert base + "/dev-v1.1.json" in msg and "HARNESS_DATA_MIRROR" in msg
    assert len(state.log) == 4  # the first cut made progress; then 1 try + 2 retries without any
    assert not (tmp_path / NAME).exists()
    assert (tmp_path / (NAME + ".part")).exists()


def test_server_error_is_retried(server, tmp_path):
    base, state = server
    state.fail_first = 1
    assert fetch(remote(base), cache_dir=tmp_path, timeout=T).read_bytes() == DATA
    assert len(state.log) == 2


def test_server_error_after_retries_names_status(server, tmp_path):
    base, state = server
    state.fail_first = 10
    with pytest.raises(DataError) as err:
        fetch(remote(base), cache_dir=tmp_path, timeout=T, retries=1)
    assert "503" in str(err.value) and base + "/dev-v1.1.json" in str(err.value)
    assert len(state.log) == 2


def test_complete_part_without_known_size_gets_416(server, tmp_path):
    base, state = server
    part = tmp_path / (NAME + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(DATA)  # streamed fully by an earlier run that died before the rename
    path = fetch(remote(base, size=None), cache_dir=tmp_path, timeout=T)
    assert path.read_bytes() == DATA
    assert state.log == [("/dev-v1.1.json", f"bytes={len(DATA)}-")]


def test_content_encoding_gzip_keeps_stored_bytes(server, tmp_path):
    import gzip

    base, state = server
    gz = gzip.compress(DATA, mtime=0)
    state.files["/dev.json.gz"] = gz
    state.headers["Content-Encoding"] = "gzip"  # as some servers label .gz files
    f = RemoteFile(name="squad/dev.json.gz", url=base + "/dev.json.gz", sha256=hashlib.sha256(gz).hexdigest())
    assert fetch(f, cache_dir=tmp_path, timeout=T).read_bytes() == gz


def test_parallel_fetches_download_once(server, tmp_path):
    base, state = server
    state.sleep = 0.3
    results: list[Path | Exception] = []

    def run() -> None:
        try:
            results.append(fetch(remote(base), cache_dir=tmp_path, timeout=T))
        except (DataError, OSError) as exc:  # reported by the assertion below
            results.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == [tmp_path / NAME] * 3
    assert len(state.log) == 1


def test_404_names_status_and_url(server, tmp_path):
    base, _ = server
    url = base + "/missing.json"
    with pytest.raises(DataError) as err:
        fetch(remote(base, "/missing.json"), cache_dir=tmp_path, timeout=T)
    assert "404" in str(err.value) and url in str(err.value)
    assert not (tmp_path / NAME).exists()
    assert not (tmp_path / (NAME + ".part")).exists()


def test_timeout_raises_data_error(server, tmp_path):
    base, state = server
    state.sleep = 3.0
    with pytest.raises(DataError) as err:
        fetch(remote(base), cache_dir=tmp_path, timeout=0.3, retries=0)
    msg = str(err.value)
    assert "0.3 s" in msg and base + "/dev-v1.1.json" in msg
    assert not (tmp_path / NAME).exists()


def test_corrupted_download_refetched_once_then_fails(server, tmp_path):
    base, state = server
    bad = bytes(b ^ 0xFF for b in DATA[:10]) + DATA[10:]
    state.files["/dev-v1.1.json"] = bad
    with pytest.raises(DataError) as err:
        fetch(remote(base), cache_dir=tmp_path, timeout=T)
    msg = str(err.value)
    assert SHA in msg and hashlib.sha256(bad).hexdigest() in msg
    assert base + "/dev-v1.1.json" in msg
    assert len(state.log) == 2 and all(rng is None for _, rng in state.log)  # 2nd fetch from scratch
    assert not (tmp_path / NAME).exists()
    assert not (tmp_path / (NAME + ".part")).exists()


def test_corrupted_then_good_download_succeeds(server, tmp_path):
    base, state = server
    part = tmp_path / (NAME + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * len(DATA))  # a complete-looking but wrong leftover
    path = fetch(remote(base), cache_dir=tmp_path, timeout=T)
    assert path.read_bytes() == DATA
    assert state.log == [("/dev-v1.1.json", None)]


def test_unreachable_network_gives_mirror_hint(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    f = RemoteFile(name=NAME, url=f"http://127.0.0.1:{port}/dev-v1.1.json", sha256=SHA)
    with pytest.raises(DataError) as err:
        fetch(f, cache_dir=tmp_path, timeout=T, retries=0)
    msg = str(err.value)
    assert "network unreachable" in msg and f.url in msg and "HARNESS_DATA_MIRROR=" in msg
    assert "data.mirror" in msg


# ----------------------------------------------------------------------------------------- mirrors


def test_mirror_hit_makes_no_request(server, tmp_path):
    base, state = server
    mirror = tmp_path / "mirror"
    (mirror / "squad").mkdir(parents=True)
    (mirror / NAME).write_bytes(DATA)
    cache = tmp_path / "cache"
    path = fetch(remote(base), cache_dir=cache, mirrors=[mirror], timeout=T)
    assert path == mirror / NAME  # returned in place, not copied
    assert not (cache / NAME).exists()
    assert state.log == []


def test_mirror_path_and_env_mirror(server, tmp_path, monkeypatch):
    base, state = server
    empty, mirror = tmp_path / "empty", tmp_path / "mirror"
    empty.mkdir()
    (mirror / "other").mkdir(parents=True)
    (mirror / "other" / "dev.json").write_bytes(DATA)
    monkeypatch.setenv("HARNESS_DATA_MIRROR", os.pathsep.join([str(empty), "", str(mirror)]))
    assert mirror_dirs_from_env() == [empty, mirror]
    path = fetch(remote(base, mirror_path="other/dev.json"), cache_dir=tmp_path / "c", timeout=T)
    assert path == mirror / "other" / "dev.json"
    assert state.log == []


def test_mirror_verification_is_remembered(server, tmp_path, monkeypatch):
    base, _ = server
    mirror = tmp_path / "mirror"
    (mirror / "squad").mkdir(parents=True)
    (mirror / NAME).write_bytes(DATA)
    calls = count_hashes(monkeypatch)
    fetch(remote(base), cache_dir=tmp_path / "c", mirrors=[mirror], timeout=T)
    fetch(remote(base), cache_dir=tmp_path / "c", mirrors=[mirror], timeout=T)
    assert len(calls) == 1


def test_corrupted_mirror_is_an_error(server, tmp_path):
    base, state = server
    mirror = tmp_path / "mirror"
    (mirror / "squad").mkdir(parents=True)
    bad = DATA[:-1] + b"!"
    (mirror / NAME).write_bytes(bad)
    with pytest.raises(DataError) as err:
        fetch(remote(base), cache_dir=tmp_path / "cache", mirrors=[mirror], timeout=T)
    msg = str(err.value)
    assert str(mirror / NAME) in msg and SHA in msg and hashlib.sha256(bad).hexdigest() in msg
    assert state.log == []  # no silent fall-through to the download
    assert (mirror / NAME).read_bytes() == bad  # mirrors are never touched


# ------------------------------------------------------------------------------------------- cache


def test_cache_hit_uses_sidecar_without_rehash(server, tmp_path, monkeypatch):
    base, state = server
    fetch(remote(base), cache_dir=tmp_path, timeout=T)
    calls = count_hashes(monkeypatch)
    path = fetch(remote(base), cache_dir=tmp_path, timeout=T)
    assert path.read_bytes() == DATA
    assert calls == [] and len(state.log) == 1


def test_cache_rehashes_when_mtime_changes(server, tmp_path, monkeypatch):
    base, state = server
    path = fetch(remote(base), cache_dir=tmp_path, timeout=T)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    calls = count_hashes(monkeypatch)
    fetch(remote(base), cache_dir=tmp_path, timeout=T)
    assert len(calls) == 1 and len(state.log) == 1
    calls.clear()
    fetch(remote(base), cache_dir=tmp_path, timeout=T)  # the sidecar was refreshed
    assert calls == []


def test_cache_without_sidecar_is_verified_once(server, tmp_path, monkeypatch):
    base, state = server
    (tmp_path / "squad").mkdir()
    (tmp_path / NAME).write_bytes(DATA)
    calls = count_hashes(monkeypatch)
    for _ in range(2):
        fetch(remote(base), cache_dir=tmp_path, timeout=T, offline=True)
    assert len(calls) == 1 and state.log == []


def test_corrupted_cache_is_removed_and_redownloaded(server, tmp_path):
    base, state = server
    (tmp_path / "squad").mkdir()
    (tmp_path / NAME).write_bytes(b"not squad")
    (tmp_path / (NAME + ".verified")).write_text('{"size": 9, "mtime_ns": 0, "sha256": "x"}')
    path = fetch(remote(base), cache_dir=tmp_path, timeout=T)
    assert path.read_bytes() == DATA and len(state.log) == 1


def test_sidecar_for_other_checksum_is_not_trusted(server, tmp_path):
    base, state = server
    fetch(remote(base), cache_dir=tmp_path, timeout=T)
    other = hashlib.sha256(b"other").hexdigest()
    state.files["/dev-v1.1.json"] = b"other"
    path = fetch(remote(base, sha256=other, size=None), cache_dir=tmp_path, timeout=T)
    assert path.read_bytes() == b"other" and len(state.log) == 2


# ----------------------------------------------------------------------------------------- offline


def test_offline_without_mirror_names_url_and_setting(server, tmp_path, monkeypatch):
    base, state = server
    monkeypatch.setenv("HARNESS_OFFLINE", "1")
    f = remote(base)
    with pytest.raises(DataError) as err:
        fetch(f, cache_dir=tmp_path / "cache", timeout=T)
    msg = str(err.value)
    assert msg.startswith(f"cannot get {NAME}: offline")
    assert f.url in msg and str(tmp_path / "cache" / NAME) in msg
    assert "HARNESS_DATA_MIRROR=<dir>" in msg and "data.mirror" in msg
    assert state.log == []


def test_offline_argument_and_missing_mirror_listed(server, tmp_path):
    base, state = server
    with pytest.raises(DataError) as err:
        fetch(remote(base), cache_dir=tmp_path, mirrors=[tmp_path / "nope"], offline=True, timeout=T)
    assert f"{tmp_path / 'nope'} (missing)" in str(err.value)
    assert state.log == []


def test_offline_mirror_and_cache_still_work(server, tmp_path):
    base, state = server
    mirror = tmp_path / "mirror"
    (mirror / "squad").mkdir(parents=True)
    (mirror / NAME).write_bytes(DATA)
    assert fetch(remote(base), cache_dir=tmp_path / "c", mirrors=[mirror], offline=True) == mirror / NAME
    assert state.log == []


# --------------------------------------------------------------------------------- verify, helpers


def test_verify_names_expected_and_actual(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    verify(p, RemoteFile(name="f.bin", url="http://127.0.0.1/f", sha256=hashlib.sha256(b"abc").hexdigest()))
    with pytest.raises(DataError) as err:
        verify(p, RemoteFile(name="f.bin", url="http://127.0.0.1/f", md5=MD5))
    assert MD5 in str(err.value) and hashlib.md5(b"abc").hexdigest() in str(err.value)
    with pytest.raises(DataError) as err:
        verify(p, RemoteFile(name="f.bin", url="http://127.0.0.1/f", size=4))
    assert "4 B" in str(err.value) and hashlib.sha256(b"abc").hexdigest() in str(err.value)


def test_helpers_stream(tmp_path):
    p = tmp_path / "big.bin"
    p.write_bytes(DATA * 8)  # several chunks
    assert sha256_of(p) == hashlib.sha256(DATA * 8).hexdigest()
    assert md5_of(p) == hashlib.md5(DATA * 8).hexdigest()


@pytest.mark.parametrize(
    "kw",
    [
        {"name": "/abs/path"},
        {"name": "../escape"},
        {"name": ""},
        {"mirror_path": "a/../../b"},
        {"sha256": "1234"},
        {"md5": SHA},
        {"size": -1},
    ],
)
def test_remote_file_rejects_bad_fields(kw):
    args: dict[str, object] = {"name": "a/b", "url": "http://127.0.0.1/x"}
    args.update(kw)
    with pytest.raises(DataError):
        RemoteFile(**args)  # type: ignore[arg-type]


def test_non_http_url_is_rejected(tmp_path):
    with pytest.raises(DataError) as err:
        fetch(RemoteFile(name="x", url="ftp://example.org/x"), cache_dir=tmp_path, timeout=T)
    assert "ftp://example.org/x" in str(err.value)
