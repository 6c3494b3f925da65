"""`python -m harness --log FILE <command>`: output goes to FILE, why a command failed also to the console."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.config import REPO

# A stand-in command module (so these tests do not depend on any real command's state):
# prints, runs a child process that writes to fds 1 and 2 (as the JVM does), then fails as asked.
FAKE = textwrap.dedent("""
    import subprocess, sys
    from harness.errors import DataError

    def main(argv):
        print("working on it")
        print("a warning", file=sys.stderr)
        subprocess.run(["sh", "-c", "echo child-stdout; echo child-stderr >&2"], check=True)
        how = argv[0]
        if how == "harness-error":
            raise DataError("data.jsonl:3: not UTF-8", fix="fetch it again")
        if how == "crash":
            raise KeyError("gold")
        if how == "status":
            print("  BREACH smoke/dpr/Success@1: measured 0.1, expected 0.9")
            return 1
        return 0
""")
RUN_FAKE = ("import sys, harness.cli as c; c.COMMANDS['fake'] = ('fake_command', 'a test command'); "
            "sys.exit(c.main(sys.argv[1:]))")


def harness(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True, check=False,
                          timeout=120, env=env)


@pytest.fixture
def fake(tmp_path):
    (tmp_path / "fake_command.py").write_text(FAKE, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", RUN_FAKE, *args], cwd=tmp_path, capture_output=True,
                              text=True, check=False, timeout=120, env=env)
    return run


def test_harness_error_reaches_console_and_log(tmp_path):
    log = tmp_path / "logs" / "config.log"          # the folder is created
    r = harness("--log", str(log), "config", "--config", "/nonexistent.yaml")
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr == "error: config file /nonexistent.yaml does not exist\n"
    assert "error: config file /nonexistent.yaml does not exist" in log.read_text()


def test_without_log_nothing_changes(tmp_path):
    r = harness("config", "--config", "/nonexistent.yaml")
    assert r.returncode == 2
    assert r.stderr == "error: config file /nonexistent.yaml does not exist\n"


def test_success_is_silent_and_output_goes_to_log(fake, tmp_path):
    log = tmp_path / "ok.log"
    log.write_text("left from an earlier run\n")
    r = fake("--log", str(log), "fake", "ok")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""
    text = log.read_text()
    assert "earlier run" not in text                 # overwritten per run
    for line in ("working on it", "a warning", "child-stdout", "child-stderr"):
        assert line in text


def test_real_command_success_is_silent(tmp_path):
    log = tmp_path / "list.log"
    r = harness("--log", str(log), "datasets", "--list")
    assert r.returncode == 0, log.read_text()[-2000:]
    assert r.stdout == "" and r.stderr == ""
    assert log.read_text().strip()


def test_harness_error_with_child_output(fake, tmp_path):
    log = tmp_path / "h.log"
    r = fake(f"--log={log}", "fake", "harness-error")
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr == "error: data.jsonl:3: not UTF-8 — fix: fetch it again\n"
    text = log.read_text()
    assert "child-stderr" in text and text.rstrip().endswith("error: data.jsonl:3: not UTF-8 — fix: fetch it again")


def test_unexpected_exception_gives_last_traceback_line_and_log(fake, tmp_path):
    log = tmp_path / "crash.log"
    r = fake("--log", str(log), "fake", "crash")
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: python -m harness fake failed: KeyError: 'gold'")
    assert f"see {log}" in r.stderr
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "KeyError: 'gold'" in text


def test_nonzero_status_without_exception_echoes_last_line(fake, tmp_path):
    log = tmp_path / "status.log"
    r = fake("--log", str(log), "fake", "status")
    assert r.returncode == 1
    assert r.stderr.startswith("error: python -m harness fake exited with status 1: BREACH smoke/dpr/Success@1")
    assert f"see {log}" in r.stderr


def test_usage_error_reaches_console(tmp_path):
    log = tmp_path / "usage.log"
    r = harness("--log", str(log), "data")
    assert r.returncode == 2
    assert "the following arguments are required" in r.stderr and f"see {log}" in r.stderr
    assert "usage:" in log.read_text()


def test_bad_log_options(tmp_path):
    r = harness("--log")
    assert r.returncode == 2 and "--log needs a file name" in r.stderr
    r = harness("--log", str(tmp_path / "x.log"), "nosuch")
    assert r.returncode == 2 and r.stderr.startswith("error: unknown command 'nosuch'")


@pytest.mark.parametrize("command", [name for name in __import__("harness.cli").cli.COMMANDS if name != "bench"])
def test_every_command_prints_its_help(command):
    """`python -m harness <command> --help` prints a usage line and exits 0 (argparse formats each help
    string with %, so a stray '%' in one crashes --help: `regress --help` did)."""
    done = harness(command, "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower(), done.stdout[:500]
