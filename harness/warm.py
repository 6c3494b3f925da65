"""Warm start: the stage jobs of one Snakemake run skip importing numpy, torch, transformers and kin.

Importing torch and transformers takes 4-6 s of CPU on the 2-core machines this project runs on,
and a smoke ``reproduce_all`` has ~170 jobs that train, encode or search with a model: about 40 %
of its wall time was imports. While a Snakemake run lasts (Snakefile ``onstart`` makes the
servers' folder), a *warm server* per environment imports those libraries once and waits on a Unix
socket: one per numerics mode (:mod:`harness.numerics`: ``portable`` for train/index/search jobs,
``native`` for measure, evaluate and table jobs) and per value of the variables libraries read when they load
(Snakemake sets ``OMP_NUM_THREADS`` and its kin to each job's threads). The first job of an
environment finds no server: it starts one and waits for it to listen (cold, it would import the
same libraries; the wait is bounded, and a server that dies lets it run cold); every job of that
environment is warm. ``python -m harness train|index|search|measure|evaluate --job ...`` and ``table --paper ...``
(:func:`run`) hands the server its arguments, working folder, environment and its stdin, stdout
and stderr (file descriptors passed over the socket); the server forks, and the child runs the
command as the process itself would have (``harness.cli.main``), with its exit status passed back.

What keeps it the same process as a cold one:
- Only third-party libraries are preloaded: the harness's own modules are imported by each child
  from the checkout, as a cold process would.
- The child takes the client's environment whole; a variable that a library reads when it loads
  (``LOAD_TIME`` prefixes: OpenMP, MKL, OpenBLAS, torch, oneDNN, faiss, CUDA, Hugging Face, ...)
  must equal the server's, else the server refuses and the command runs cold.
- Nothing the server imports has run a parallel region, so the OpenMP and OpenBLAS thread pools are
  created in the child (tests/test_warm.py compares a warm child's model with a cold process's).
- A signal the client gets (Snakemake cancelling the job) is forwarded to the child; if the client
  dies, the child ends too (it watches the socket).

Any failure to reach a server (none started, a cluster node, a refused environment) runs the
command cold, as before. ``HARNESS_WARM=0`` turns it off for a Snakemake run.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

#: the environment variable that names the servers' folder (set for the jobs of one Snakemake run)
ENV_DIR = "HARNESS_WARM_DIR"
#: the process whose end ends the servers (the Snakemake run)
ENV_PARENT = "HARNESS_WARM_PARENT"
#: set in a warm child's environment: the server's mode
CHILD = "HARNESS_WARM_CHILD"
#: what a server imports before it listens: the libraries its jobs import, not only their top
#: packages (transformers' is lazy: a job's first ``AutoModel`` still imported modeling_utils, the
#: BERT modules, torch.distributed, scipy and sympy: 2-4 s of every warm job here). Never a library
#: that starts a thread of its own or a JVM when imported (pyserini, jnius; pandas, whose pyarrow
#: starts jemalloc's background thread): a fork copies only the calling thread. The only threads a
#: server has are OpenBLAS's pools (numpy's and scipy's), which re-create themselves in a forked
#: child (tests/test_warm.py checks that preloading adds no other). A module not installed is skipped.
PRELOAD = ("numpy", "torch", "transformers", "transformers.modeling_utils",
           "transformers.models.auto.modeling_auto", "transformers.models.auto.tokenization_auto",
           "transformers.models.bert.modeling_bert", "transformers.models.bert.tokenization_bert",
           "scipy.sparse", "scipy.stats", "sympy", "accelerate", "numba", "faiss", "peft")
#: how long a job waits for a server that another job (or it) started to listen, before running cold
AWAIT_S = 60.0
#: seconds a client waits, after its job's status, for the child to have exited (:func:`_await_exit`)
EXIT_WAIT_S = 60.0
#: the commands a server runs, each with the option that makes it one job of a run: a plan job's
#: (``--job``: they load models) and a rendered table's (``--paper``: the learning check's paired
#: tests import scipy.stats, half of a cold table job). Every other command runs cold.
COMMANDS = {"train": "--job", "index": "--job", "search": "--job", "measure": "--job", "evaluate": "--job",
            "table": "--paper"}
#: variables the preloaded libraries (or the interpreter) read when they load: a client whose values
#: differ from the server's is refused (it runs cold)
LOAD_TIME = ("OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "GOTO", "BLIS_", "ATEN_", "ONEDNN_", "DNNL_",
             "FAISS_", "TORCH", "PYTORCH_", "CUDA_", "NVIDIA_", "CUBLAS_", "TRANSFORMERS_", "HF_",
             "TOKENIZERS_", "PYTHON", "LD_", "NUMEXPR_", "VECLIB_")


def fingerprint(env: Mapping[str, str]) -> str:
    """sha256 of the load-time variables of ``env`` (name=value, sorted)."""
    items = sorted(f"{k}={v}" for k, v in env.items() if k.startswith(LOAD_TIME))
    return hashlib.sha256("\n".join(items).encode()).hexdigest()


def _command(argv: list[str]) -> tuple[str | None, list[str]]:
    """(command, its arguments) of ``python -m harness [--log FILE] <command> ...``."""
    from harness.cli import split_log

    rest = split_log(argv)[1]
    return (rest[0], rest[1:]) if rest else (None, [])


def mode_of(argv: list[str]) -> str | None:
    """The numerics mode a warm server must have for this command, or None when the command is not
    one a server runs (every command but a job's: :data:`COMMANDS`)."""
    from harness import numerics

    command, args = _command(argv)
    key = COMMANDS.get(command or "")
    if key is None or key not in args and not any(a.startswith(f"{key}=") for a in args):
        return None
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--config", "--configfile", dest="config", nargs="*", default=[])
    known, _ = ap.parse_known_args(args)
    return numerics.mode_for(command, numerics.requested(known.config))


def socket_path(folder: Path, mode: str, env: Mapping[str, str]) -> Path:
    """The socket of the server for ``mode`` and the load-time variables of ``env``."""
    return Path(folder) / f"{mode}-{fingerprint(env)[:16]}.sock"


def _mode_env(mode: str, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` as the command sees it once it has applied ``mode`` (harness.stages.run_stage)."""
    from harness import numerics

    out = dict(env)
    numerics.apply(mode, out)
    return out


def _spawn(folder: Path, mode: str, path: Path) -> None:
    """Start the server of ``path`` with this process's environment, unless another job already is;
    its pid goes into the ``.starting`` marker (:func:`_await`)."""
    parent = os.environ.get(ENV_PARENT, "")
    if not parent.isdigit():
        return
    try:
        fd = os.open(path.with_suffix(".starting"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError:
        return
    with open(path.with_suffix(".log"), "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "harness.warm", "--dir", str(folder), "--mode", mode,
                                 "--parent", parent], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
    os.write(fd, str(proc.pid).encode())
    os.close(fd)


def _alive(pid: int) -> bool:
    """The process runs (a dead server the spawning job has not reaped is a zombie: not alive)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _await(path: Path, limit_s: float = AWAIT_S) -> bool:
    """Wait for the server of ``path`` that a job started to listen: it imports what this command
    would import cold, so waiting costs nothing (two processes importing at once on a small machine
    each take longer). False, to run cold, when none is starting, it died, or ``limit_s`` passed."""
    marker = path.with_suffix(".starting")
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if path.exists():
            return True
        try:
            pid = marker.read_text()
        except OSError:
            return False
        if pid.isdigit() and not _alive(int(pid)):
            return False
        time.sleep(0.05)
    return False


# --------------------------------------------------------------------------- client

def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("warm server closed the connection")
        buf += chunk
    return buf


def run(argv: list[str]) -> int | None:
    """Run ``python -m harness argv`` in a warm server's child: its exit status, or None when no
    server takes it (run it cold)."""
    folder = os.environ.get(ENV_DIR)
    if not folder or os.environ.get("HARNESS_WARM", "1") == "0":
        return None
    try:
        mode = mode_of(argv)
    except Exception:  # noqa: BLE001 (a bad config: the cold command reports it properly)
        return None
    if mode is None:
        return None
    path = socket_path(Path(folder), mode, _mode_env(mode, os.environ))
    if not path.exists() and Path(folder).is_dir():
        _spawn(Path(folder), mode, path)
        if not _await(path):
            return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    try:
        payload = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
        socket.send_fds(sock, [struct.pack("!Q", len(payload))], [0, 1, 2])
        sock.sendall(payload)
        kind = _recv_exact(sock, 1)
    except OSError:
        sock.close()
        return None
    if kind != b"P":  # refused: another environment than the server's
        sock.close()
        return None
    pid = struct.unpack("!q", _recv_exact(sock, 8))[0]

    def forward(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    try:
        if _recv_exact(sock, 1) != b"X":
            return 1
        rc = struct.unpack("!i", _recv_exact(sock, 4))[0]
        _await_exit(sock)
        return rc
    except ConnectionError:  # the child died without a status (killed)
        return 1
    finally:
        sock.close()


def _await_exit(sock: socket.socket, limit_s: float = EXIT_WAIT_S) -> None:
    """Return once the child at the other end of ``sock`` has exited (the kernel closes its end after
    releasing its memory), or after ``limit_s``. The child sends its status, then exits: a client that
    returned at the status let Snakemake start the next job while a large one was still exiting, and the
    next job's memory guard (harness.cost.memory_guard) read the machine's available memory then (the
    rehearsal: a job that failed holding 20.4 GiB, and the next capped at 11.5 GiB, out of memory at 10.6)."""
    sock.settimeout(limit_s)
    with contextlib.suppress(OSError):
        while sock.recv(4096):
            pass


# --------------------------------------------------------------------------- server

def _child(conn: socket.socket, mode: str, server_fp: str, set_by_imports: Mapping[str, str]) -> None:
    """In the forked child: become the client's process, run its command, send its status. Never returns."""
    from harness import numerics

    rc = 1
    try:
        head, fds, _, _ = socket.recv_fds(conn, 8, 3)
        if len(head) < 8:
            head += _recv_exact(conn, 8 - len(head))
        req = json.loads(_recv_exact(conn, struct.unpack("!Q", head)[0]))
        numerics.apply(mode, req["env"])  # what the command sets first thing (harness.stages.run_stage)
        if fingerprint(req["env"]) != server_fp:
            for fd in fds:
                os.close(fd)
            conn.sendall(b"R")
            os._exit(0)
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        for k, v in set_by_imports.items():
            os.environ.setdefault(k, v)
        os.environ[CHILD] = mode  # meta.json's warm_start (harness.stages)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the process's own streams, open until it exits)
        sys.stdout = open(1, "w", buffering=1 if os.isatty(1) else -1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115 (as Python opens it)
        sys.argv = [str(Path(__file__).with_name("__main__.py")), *req["argv"]]
        conn.sendall(b"P" + struct.pack("!q", os.getpid()))

        def watch() -> None:  # the client gone (SIGKILL): this job is over
            with contextlib.suppress(OSError):
                conn.recv(1)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)
            os._exit(137)

        threading.Thread(target=watch, daemon=True).start()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from harness.cli import main

        try:
            rc = int(main(req["argv"]) or 0)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 (what a cold process would print before exiting 1)
            import traceback

            traceback.print_exc()
            rc = 1
        import logging

        logging.shutdown()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        with contextlib.suppress(OSError):
            conn.sendall(b"X" + struct.pack("!i", rc))
        os._exit(rc)


def preload() -> list[str]:
    """Import PRELOAD (those installed): the modules imported."""
    import importlib

    done = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        done.append(name)
    return done


def serve(folder: Path, mode: str, parent: int) -> int:
    """Preload PRELOAD under ``mode``'s variables, then fork a child per connection until the
    process ``parent`` (the Snakemake run) is gone."""
    from harness import numerics

    numerics.apply(mode)
    loaded_under = dict(os.environ)  # what the libraries read as they loaded: the clients must match it
    preload()
    # what importing them set (transformers' import of torch._inductor sets TORCHINDUCTOR_CACHE_DIR):
    # a cold process would have it too, so each child gets it
    set_by_imports = {k: v for k, v in os.environ.items() if k not in loaded_under}
    server_fp = fingerprint(loaded_under)
    path = socket_path(folder, mode, loaded_under)
    tmp = path.with_suffix(".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(tmp))
    sock.listen(64)
    os.replace(tmp, path)  # clients see the socket only once it accepts
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    sock.settimeout(2.0)
    sys.stdout.flush()
    sys.stderr.flush()
    while path.exists():  # the run removes the folder when it ends (stop)
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            break
        try:
            conn, _ = sock.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        if os.fork() == 0:
            sock.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _child(conn, mode, server_fp, set_by_imports)
        conn.close()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return 0


def precompile() -> None:
    """Byte-compile the harness package into its ``__pycache__`` (compileall: only modules whose
    source changed). Where ``PYTHONDONTWRITEBYTECODE`` is set, as on this project's machines, no
    import writes them, and every job process compiled the package's modules again from source
    (about 0.5 s of a 1-3 s evaluate or table job). A failure (a read-only checkout) is harmless:
    imports then compile in memory, as before."""
    import compileall

    with contextlib.suppress(OSError):
        compileall.compile_dir(str(Path(__file__).resolve().parent), quiet=2, workers=1)


def start() -> Path | None:
    """Make the servers' folder for this process's lifetime (the Snakemake run) and set
    ``HARNESS_WARM_DIR`` and ``HARNESS_WARM_PARENT`` for the jobs it launches (they start the servers).
    None when ``HARNESS_WARM=0``."""
    if os.environ.get("HARNESS_WARM", "1") == "0":
        return None
    folder = Path(tempfile.mkdtemp(prefix="harness-warm-"))
    os.environ[ENV_DIR] = str(folder)
    os.environ[ENV_PARENT] = str(os.getpid())
    return folder


def stop() -> None:
    """Remove the servers' folder, sockets and logs (the servers exit with their parent; a job still
    connecting runs cold)."""
    import shutil

    folder = os.environ.pop(ENV_DIR, None)
    os.environ.pop(ENV_PARENT, None)
    if folder and Path(folder).name.startswith("harness-warm-"):
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.warm", description="a warm server (see harness.warm)")
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--mode", required=True, choices=("portable", "native"))
    ap.add_argument("--parent", type=int, required=True)
    args = ap.parse_args(argv)
    return serve(args.dir, args.mode, args.parent)


if __name__ == "__main__":
    sys.exit(main())
