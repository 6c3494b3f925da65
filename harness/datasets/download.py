"""Resolve a dataset file: cache, then mirror folders, then the official URL with checksum.

Every dataset module describes its files as `RemoteFile`s and calls `fetch`, which returns a local path
to a file whose checksum has been verified:

1. **cache**: `cache_dir/name`. A `<file>.verified` JSON sidecar (size, mtime_ns, sums) lets a later call
   trust the file without hashing it again while its size and mtime are unchanged. A cache file that
   fails verification is removed and resolved again.
2. **mirror folders** (read-only; given by the caller and by env `HARNESS_DATA_MIRROR`): the file
   `mirror/(mirror_path or name)` is returned in place, never copied. A mirror file that fails
   verification is an error: a damaged mirror is something the user must know about.
3. **download**: streamed into `cache_dir/name + ".part"` (resumed with an HTTP Range request where the
   server allows it), verified, then moved into place with `os.replace`, so nothing that looks finished
   is ever left half-written. A checksum mismatch re-fetches once from scratch, then fails.

Offline (`offline=True` or env `HARNESS_OFFLINE=1`) or with the network unreachable, the error names
the file, its URL and how to set up a mirror.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from harness.errors import DataError

if TYPE_CHECKING:
    import requests

__all__ = [
    "MIRROR_ENV",
    "OFFLINE_ENV",
    "RemoteFile",
    "fetch",
    "md5_of",
    "mirror_dirs_from_env",
    "offline_from_env",
    "sha256_of",
    "verify",
]

log = logging.getLogger(__name__)

MIRROR_ENV = "HARNESS_DATA_MIRROR"
OFFLINE_ENV = "HARNESS_OFFLINE"
MIRROR_CONFIG_KEY = "data.mirror"

_CHUNK = 1 << 20  # bytes per read/write while streaming and hashing
_BACKOFF_S = 1.0  # seconds before retry k is k * _BACKOFF_S (tests set it to 0)
_USER_AGENT = "ir-repro-harness (dataset download)"
_HEX = {"sha256": re.compile(r"[0-9a-f]{64}"), "md5": re.compile(r"[0-9a-f]{32}")}


@dataclass(frozen=True)
class RemoteFile:
    """One published data file: where it lives in the cache, where to download it, how to check it."""

    name: str  # path relative to the cache dir, e.g. "squad/dev-v1.1.json"
    url: str  # official URL
    sha256: str | None = None
    md5: str | None = None  # when only a published md5 exists
    size: int | None = None
    mirror_path: str | None = None  # path relative to a mirror folder (defaults to name)

    def __post_init__(self) -> None:
        _check_relative(self.name, "name", self)
        if self.mirror_path is not None:
            _check_relative(self.mirror_path, "mirror_path", self)
        for algo in ("sha256", "md5"):
            value = getattr(self, algo)
            if value is None:
                continue
            norm = value.strip().lower()
            if not _HEX[algo].fullmatch(norm):
                raise DataError(
                    f"RemoteFile {self.name!r}: {algo} {value!r} is not a {algo} hex digest",
                    fix=f"give the published {algo} as hex digits, or leave it out",
                )
            object.__setattr__(self, algo, norm)
        if self.size is not None and (not isinstance(self.size, int) or self.size < 0):
            raise DataError(
                f"RemoteFile {self.name!r}: size {self.size!r} is not a byte count",
                fix="give the size in bytes as a non-negative int, or leave it out",
            )

    @property
    def in_mirror(self) -> str:
        """Path of this file relative to a mirror folder."""
        return self.mirror_path or self.name


def _check_relative(value: str, field: str, f: RemoteFile) -> None:
    p = PurePosixPath(value)
    if not value or p.is_absolute() or ".." in p.parts or "\\" in value:
        raise DataError(
            f"RemoteFile {f.name!r} ({f.url}): {field} {value!r} is not a relative path",
            fix=f"write {field} as a relative POSIX path without '..', e.g. 'squad/dev-v1.1.json'",
        )


# --------------------------------------------------------------------------------------------- env


def mirror_dirs_from_env() -> list[Path]:
    """Mirror folders named in env HARNESS_DATA_MIRROR (os.pathsep-separated; empty parts ignored)."""
    value = os.environ.get(MIRROR_ENV, "")
    return [Path(part.strip()).expanduser() for part in value.split(os.pathsep) if part.strip()]


def offline_from_env() -> bool:
    """True when env HARNESS_OFFLINE asks for no network access (1, true, yes, on)."""
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


# ------------------------------------------------------------------------------------------ hashing


def _digests(path: Path, algos: Sequence[str]) -> dict[str, str]:
    """Hex digests of `path` for each algorithm in `algos`, in one streaming pass."""
    hashers = {algo: hashlib.new(algo) for algo in algos}
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            for h in hashers.values():
                h.update(chunk)
    return {algo: h.hexdigest() for algo, h in hashers.items()}


def sha256_of(path: Path) -> str:
    """sha256 hex digest of a file, read in chunks (constant memory)."""
    return _digests(Path(path), ("sha256",))["sha256"]


def md5_of(path: Path) -> str:
    """md5 hex digest of a file, read in chunks (constant memory)."""
    return _digests(Path(path), ("md5",))["md5"]


def _check(path: Path, f: RemoteFile) -> tuple[str | None, dict[str, str]]:
    """Hash `path` once; return (what is wrong or None, the digests computed).

    sha256 is always computed (it goes into the sidecar as provenance); md5 only when `f` publishes one.
    """
    algos = ["sha256"] + (["md5"] if f.md5 else [])
    size = path.stat().st_size
    sums = _digests(path, algos)
    problems = []
    if f.size is not None and size != f.size:
        problems.append(f"expected size {f.size} B, got {size} B")
    for algo in ("sha256", "md5"):
        expected = getattr(f, algo)
        if expected and sums[algo] != expected:
            problems.append(f"expected {algo} {expected}, got {sums[algo]}")
    if problems and not (f.sha256 or f.md5):  # name the actual sum even when only the size was known
        problems.append(f"its sha256 is {sums['sha256']}")
    return ("; ".join(problems) or None), sums


def verify(path: Path, f: RemoteFile) -> None:
    """Check `path` against the size and sums of `f`; raise DataError naming expected and actual sums."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"cannot verify {path}: no such file", fix=f"fetch {f.name} from {f.url} first")
    problem, _ = _check(path, f)
    if problem:
        raise DataError(
            f"{path} does not match {f.name}: {problem}",
            fix=f"delete it and download {f.url} again",
        )


# ------------------------------------------------------------------------------------------ sidecar


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _mirror_record(cache_dir: Path, f: RemoteFile) -> Path:
    return cache_dir / ".mirror-verified" / (f.name + ".json")


def _trusted(path: Path, record: Path, f: RemoteFile, *, source: str | None = None) -> bool:
    """True when `record` says `path` (same size and mtime_ns) was verified with the sums `f` expects."""
    try:
        rec = json.loads(record.read_text(encoding="utf-8"))
        st = path.stat()
    except (OSError, ValueError):
        return False
    if not isinstance(rec, dict):
        return False
    if rec.get("size") != st.st_size or rec.get("mtime_ns") != st.st_mtime_ns:
        return False
    if source is not None and rec.get("path") != source:
        return False
    if f.size is not None and st.st_size != f.size:
        return False
    return all(rec.get(algo) == getattr(f, algo) for algo in ("sha256", "md5") if getattr(f, algo))


def _write_record(path: Path, record: Path, sums: dict[str, str], *, source: str | None = None) -> None:
    """Write the verification record atomically; a cache we cannot write to only costs a re-hash later."""
    st = path.stat()
    rec: dict[str, object] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, **sums}
    if source is not None:
        rec["path"] = source
    tmp = record.with_name(f"{record.name}.{os.getpid()}.tmp")
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(rec, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, record)
    except OSError as exc:
        log.debug("cannot write verification record %s: %s", record, exc)
        with contextlib.suppress(OSError):
            tmp.unlink()


def _unlink(*paths: Path) -> None:
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """Hold an exclusive lock on `target + ".lock"` so parallel jobs do not download the same file twice.

    Without fcntl (Windows) or a writable cache folder, runs unlocked.
    """
    fd = None
    try:
        import fcntl

        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target.with_name(target.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except (ImportError, OSError) as exc:
        log.debug("downloading %s without a lock: %s", target, exc)
        if fd is not None:
            os.close(fd)
            fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock


# -------------------------------------------------------------------------------------------- fetch


def fetch(
    f: RemoteFile,
    *,
    cache_dir: Path,
    mirrors: Sequence[Path] = (),
    offline: bool | None = None,
    timeout: float = 60.0,
    retries: int = 1,
) -> Path:
    """Return a verified local path for `f`: from the cache, a mirror folder, or a download.

    `mirrors` are searched first, then those in env HARNESS_DATA_MIRROR. `offline=None` reads env
    HARNESS_OFFLINE. `timeout` bounds connecting and each read (seconds); `retries` is how many times a
    broken or timed-out transfer is tried again without progress (an attempt that adds bytes to the
    partial file does not count). Raises DataError with the fix when the file cannot be had.
    """
    cache_dir = Path(cache_dir)
    final = cache_dir / f.name
    all_mirrors = _merge_mirrors(mirrors, mirror_dirs_from_env())
    offline_env = offline is None and offline_from_env()
    offline = offline_env if offline is None else offline

    # 1. cache: fast path on the sidecar, without taking a lock or writing anything.
    if final.is_file() and _trusted(final, _sidecar(final), f):
        return final
    removed_bad_cache = False
    if final.exists():
        with _locked(final):
            hit, removed_bad_cache = _check_cache(final, f)
        if hit:
            return final

    # 2. mirror folders, read-only and returned in place.
    for mirror in all_mirrors:
        candidate = mirror / f.in_mirror
        if candidate.is_file():
            return _use_mirror(candidate, mirror, f, cache_dir)

    # 3. download.
    if offline:
        why = f"offline ({OFFLINE_ENV}=1)" if offline_env else "offline"
        if removed_bad_cache:
            why += " (the cached copy failed verification and was removed)"
        raise _unavailable(f, why, final, all_mirrors)
    with _locked(final):
        if final.is_file():  # another process may have finished it while we waited for the lock
            hit, _ = _check_cache(final, f)
            if hit:
                return final
        return _download_verified(f, final, all_mirrors, timeout=timeout, retries=retries)


def _merge_mirrors(first: Sequence[Path], second: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    seen: set[str] = set()
    for m in [*first, *second]:
        m = Path(m).expanduser()
        key = os.path.abspath(m)
        if key not in seen:
            seen.add(key)
            out.append(m)
    return out


def _check_cache(final: Path, f: RemoteFile) -> tuple[bool, bool]:
    """(hit, removed): verify a cache file, recording success and removing it on failure."""
    if not final.is_file():
        return False, False
    if _trusted(final, _sidecar(final), f):
        return True, False
    problem, sums = _check(final, f)
    if problem is None:
        _write_record(final, _sidecar(final), sums)
        return True, False
    log.warning("cached %s failed verification (%s); removing it and fetching it again", final, problem)
    _unlink(final, _sidecar(final))
    return False, True


def _use_mirror(candidate: Path, mirror: Path, f: RemoteFile, cache_dir: Path) -> Path:
    source = os.path.abspath(candidate)
    record = _mirror_record(cache_dir, f)
    if _trusted(candidate, record, f, source=source):
        return candidate
    problem, sums = _check(candidate, f)
    if problem:
        raise DataError(
            f"mirror file {candidate} is corrupted or not {f.name}: {problem}",
            fix=f"replace it with a good copy of {f.url}, or remove {mirror} from "
            f"{MIRROR_ENV} (or config key {MIRROR_CONFIG_KEY})",
        )
    _write_record(candidate, record, sums, source=source)
    return candidate


def _describe_mirrors(mirrors: Sequence[Path]) -> str:
    if not mirrors:
        return f"none set; {MIRROR_ENV} is empty"
    return ", ".join(str(m) if m.is_dir() else f"{m} (missing)" for m in mirrors)


class Unavailable(DataError):
    """A file no cache, mirror or download could provide (absent, not damaged: a file that fails
    verification is a plain DataError, never a reason to try another source)."""


def _unavailable(f: RemoteFile, why: str, final: Path, mirrors: Sequence[Path]) -> DataError:
    return Unavailable(
        f"cannot get {f.name}: {why} and not in cache ({final}) or any mirror ({_describe_mirrors(mirrors)})",
        fix=f"download {f.url} into a mirror folder as <dir>/{f.in_mirror} and set "
        f"{MIRROR_ENV}=<dir> (or config key {MIRROR_CONFIG_KEY})",
    )


# ----------------------------------------------------------------------------------------- download


class _Transient(Exception):
    """A failure worth retrying: timeout, refused/broken connection, 5xx, a short body."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind  # "timeout" | "connect" | "cut" | "http"
        self.detail = detail


def _download_verified(
    f: RemoteFile, final: Path, mirrors: Sequence[Path], *, timeout: float, retries: int
) -> Path:
    """Download into the .part file, verify, move into place; one re-fetch from scratch on mismatch."""
    scheme = urlsplit(f.url).scheme.lower()
    if scheme not in {"http", "https"}:
        raise DataError(
            f"cannot download {f.name}: URL {f.url!r} is not http(s)",
            fix=f"fix the URL of {f.name}, or put the file into a mirror folder and set {MIRROR_ENV}",
        )
    import requests  # imported here: resolving from cache or mirror needs no HTTP stack

    part = final.with_name(final.name + ".part")
    final.parent.mkdir(parents=True, exist_ok=True)
    problem = None
    with requests.Session() as session:
        session.headers["User-Agent"] = _USER_AGENT
        for round_ in (1, 2):
            _download(f, part, final, mirrors, session=session, timeout=timeout, retries=retries)
            problem, sums = _check(part, f)
            if problem is None:
                os.replace(part, final)
                _write_record(final, _sidecar(final), sums)
                if not (f.sha256 or f.md5):
                    log.warning(
                        "no checksum is known for %s; downloaded with sha256 %s", f.name, sums["sha256"]
                    )
                return final
            _unlink(part)
            if round_ == 1:
                log.warning("download of %s failed verification (%s); fetching it again", f.url, problem)
    raise DataError(
        f"cannot get {f.name}: the download from {f.url} failed verification twice: {problem}",
        fix="the file at the URL may have changed or be damaged in transit: try again later, or put "
        f"a known-good copy into a mirror folder as <dir>/{f.in_mirror} and set {MIRROR_ENV}=<dir> "
        f"(or config key {MIRROR_CONFIG_KEY})",
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _download(
    f: RemoteFile,
    part: Path,
    final: Path,
    mirrors: Sequence[Path],
    *,
    session: requests.Session,
    timeout: float,
    retries: int,
) -> None:
    """Bring `part` to a complete transfer, resuming where it stopped; raise DataError when it cannot."""
    best = _size(part)
    failures = 0
    while True:
        offset = _size(part)
        if f.size is not None and offset > f.size:
            log.info("partial file %s is larger than %s should be; starting again", part, f.name)
            _unlink(part)
            offset = 0
        if f.size is not None and offset == f.size and offset > 0:
            return  # complete from an earlier run; verification decides
        try:
            _attempt(f, part, offset, session=session, timeout=timeout)
            return
        except _Transient as exc:
            now = _size(part)
            if now > best:  # progress: keep going without spending a retry
                best = now
                log.info("download of %s broke off at %d bytes (%s); resuming", f.url, now, exc.detail)
                continue
            failures += 1
            if failures > retries:
                raise _transfer_error(f, exc, part, final, mirrors, timeout) from None
            log.info("download of %s failed (%s); retry %d of %d", f.url, exc.detail, failures, retries)
            time.sleep(_BACKOFF_S * failures)


def _transfer_error(
    f: RemoteFile, exc: _Transient, part: Path, final: Path, mirrors: Sequence[Path], timeout: float
) -> DataError:
    host = urlsplit(f.url).netloc
    if exc.kind == "connect":
        return _unavailable(f, f"network unreachable ({host}: {exc.detail})", final, mirrors)
    if exc.kind == "timeout":
        return _unavailable(f, f"no answer from {host} within {timeout:g} s ({exc.detail})", final, mirrors)
    kept = f"; the partial file {part} is kept and a new run resumes it" if _size(part) else ""
    return _unavailable(f, f"the download from {f.url} failed ({exc.detail}){kept}", final, mirrors)


def _short(exc: BaseException) -> str:
    """A one-line reason for a network exception (the innermost OS error when there is one)."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
        stack.extend(x for x in (e.__cause__, e.__context__, getattr(e, "reason", None)) if x is not None)
        stack.extend(a for a in e.args if isinstance(a, BaseException))
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)", re.IGNORECASE)
_RANGE_UNSATISFIED = re.compile(r"bytes\s+\*/(\d+)", re.IGNORECASE)


def _attempt(f: RemoteFile, part: Path, offset: int, *, session: requests.Session, timeout: float) -> None:
    """One HTTP request; append (206) or rewrite (200) `part`. Raises _Transient or DataError."""
    import requests
    import urllib3

    headers = {"Accept-Encoding": "identity"}  # byte ranges and checksums refer to the stored bytes
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        resp = session.get(f.url, headers=headers, stream=True, timeout=(timeout, timeout))
    except requests.Timeout as exc:
        raise _Transient("timeout", _short(exc)) from exc
    except requests.ConnectionError as exc:
        raise _Transient("connect", _short(exc)) from exc
    except requests.RequestException as exc:
        raise DataError(
            f"cannot download {f.name} from {f.url}: {_short(exc)}",
            fix=f"fix the URL, or put the file into a mirror folder and set {MIRROR_ENV}",
        ) from exc
    with resp:
        status = resp.status_code
        if status == 416 and offset:
            m = _RANGE_UNSATISFIED.match(resp.headers.get("Content-Range", ""))
            if m and int(m.group(1)) == offset:
                return  # the partial file already holds every byte
            _unlink(part)
            raise _Transient("http", f"HTTP 416 for a resume at byte {offset}; starting again")
        if status in (408, 429) or status >= 500:
            raise _Transient("http", f"HTTP {status} {resp.reason}")
        if status not in (200, 206):
            raise DataError(
                f"cannot download {f.name}: HTTP {status} {resp.reason} from {f.url}",
                fix="check the URL (the file may have moved), or download it by hand into a mirror "
                f"folder as <dir>/{f.in_mirror} and set {MIRROR_ENV}=<dir> (or config key {MIRROR_CONFIG_KEY})",
            )
        mode = "wb"
        if status == 206:
            m = _CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
            if not m or int(m.group(1)) != offset:
                _unlink(part)
                raise _Transient("cut", f"server answered a resume at byte {offset} with the wrong range")
            mode = "ab" if offset else "wb"
        elif offset:
            log.info("server ignored the Range request for %s; downloading from the start", f.url)
        stream = resp.raw.stream(_CHUNK, decode_content=False)
        try:
            with open(part, mode) as out:
                while True:
                    try:
                        chunk = next(stream)
                    except StopIteration:
                        break
                    except (urllib3.exceptions.ReadTimeoutError, requests.Timeout, TimeoutError) as exc:
                        raise _Transient("timeout", _short(exc)) from exc
                    except (urllib3.exceptions.HTTPError, requests.RequestException, OSError) as exc:
                        raise _Transient("cut", f"connection broke off: {_short(exc)}") from exc
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:  # writing, not reading: a full disk or a read-only cache
            raise DataError(
                f"cannot write {part}: {exc.strerror or exc}",
                fix="free disk space, or point the cache folder somewhere writable",
            ) from exc
    if f.size is not None and _size(part) < f.size:
        raise _Transient("cut", f"got {_size(part)} of {f.size} bytes")
