"""Apache RocketMQ's ``mqadmin`` from Maven, run many times in one JVM (``MQAdminShell.java``).

``mqadmin <command> -n host:port`` is ``java -cp 'lib/*' org.apache.rocketmq.tools.command.MQAdminStartup
<command> ...``: each run is a JVM start (1-2 s on an idle machine, far more on a busy one). The
tests instead start :class:`MQAdminShell` once per version: a small Java class that calls
``MQAdminStartup.main0(args, null)`` (what ``main`` does) for each request read from stdin and
frames its output, plus a real Java producer and push consumer of the same jars for the commands
that need clients online. The jars come from Maven through ``bench/compare/java.py``
(``ensure_tools_jars``: ``rocketmq-tools`` of that version and its dependencies, cached under
``~/.cache/rocketcluster/apache-rocketmq/<version>``).
"""

from __future__ import annotations

import contextlib
import queue
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.compare import java

SHELL_SOURCE = Path(__file__).resolve().parent / "MQAdminShell.java"
_END = "\x01END "
_READY = "\x01READY"
#: Versions of mqadmin the suite runs: the last 4.x and the 5.x of ``make bench-compare``
#: (``$ROCKETMQ_VERSION`` picks another 5.x).
VERSIONS = ("4.9.8", java.version())

_LOGBACK_TOOLS = (
    '<configuration><appender name="F" class="ch.qos.logback.core.FileAppender"><file>{file}</file>'
    "<encoder><pattern>%d %p %c{{1}} - %m%n</pattern></encoder></appender>"
    '<root level="WARN"><appender-ref ref="F"/></root></configuration>'
)


def _quiet_logback(version: str) -> str:
    """Silence logback's start-up status lines: 5.x shades logback, 4.9.x uses it as it is."""
    if version.startswith("4."):
        return "-Dlogback.statusListenerClass=ch.qos.logback.core.status.NopStatusListener"
    return java.QUIET_LOGBACK


#: A stack trace (an exception's name at a line start, or a frame) or mqadmin's own failure words.
_FAILURE = re.compile(r"^(([a-z][\w$]*\.)+[\w$]*(Exception|Error)\b|\s+at [\w$.]+\(|.*command failed)", re.M)


class MQAdminError(AssertionError):
    """The shell died, timed out, or a command ended in an exception / System.exit."""


@dataclass
class Result:
    """One command's captured stdout+stderr and how it ended (``ok``, ``exit N``, ``exception ...``)."""

    args: tuple[str, ...]
    output: str
    status: str
    seconds: float

    @property
    def lines(self) -> list[str]:
        """Non-empty output lines, stripped."""
        return [ln.strip() for ln in self.output.splitlines() if ln.strip()]

    def __str__(self) -> str:
        return f"mqadmin {' '.join(self.args)} [{self.status}, {self.seconds:.1f} s]\n{self.output}"


class MQAdminShell:
    """One JVM running mqadmin ``version`` against ``namesrv``; :meth:`run` is thread-safe (serialised).

    Raises :class:`java.JavaSetupError` from the constructor when Maven, javac or java fail.
    """

    def __init__(self, version: str, namesrv: str, home: Path) -> None:
        self.version = version
        self.namesrv = namesrv
        lib = java.ensure_tools_jars(version)
        classes = java.compile_java(lib, SHELL_SOURCE, "mqadmin-shell")
        home.mkdir(parents=True, exist_ok=True)
        conf = home / "conf"
        conf.mkdir(exist_ok=True)
        (conf / "logback_tools.xml").write_text(_LOGBACK_TOOLS.format(file=home / "tools.log"))
        self.home = home
        argv = [java.java(), "-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.security.manager=allow", _quiet_logback(version), f"-Duser.home={home}",
                f"-Drocketmq.home.dir={home}", f"-Drocketmq.client.logRoot={home / 'logs'}",
                "-cp", java.classpath(lib, classes), "MQAdminShell", namesrv]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(home / "shell.stderr", "wb"), text=True, encoding="utf-8",
                                     cwd=home, env={"ROCKETMQ_HOME": str(home), "PATH": "/usr/bin:/bin",
                                          "HOME": str(home)})
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Lock()
        #: ``(argv, seconds)`` of every request, for finding slow steps.
        self.history: list[tuple[tuple[str, ...], float]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._collect(timeout=120.0, until=_READY)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _collect(self, timeout: float, until: str = _END) -> tuple[list[str], str]:
        deadline = time.monotonic() + timeout
        out: list[str] = []
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(0.01, left))
            except queue.Empty:
                raise MQAdminError(f"mqadmin {self.version} gave no answer within {timeout:.0f} s; "
                                   f"output so far:\n" + "\n".join(out)) from None
            if line is None:
                raise MQAdminError(f"mqadmin shell {self.version} exited ({self.proc.poll()}): "
                                   + "\n".join(out) + self._stderr_tail())
            if line.startswith(until):
                return out, line[len(until):]
            out.append(line)

    def _stderr_tail(self) -> str:
        try:
            return "\n" + (self.home / "shell.stderr").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def run(self, *args: str, namesrv: bool = True, timeout: float = 90.0) -> Result:
        """Run ``mqadmin args...`` (``-n <namesrv>`` appended unless ``namesrv=False``)."""
        argv = tuple(args) + (("-n", self.namesrv) if namesrv else ())
        if any("\t" in a or "\n" in a for a in argv):
            raise ValueError(f"arguments may not hold tabs or newlines: {argv}")
        with self._lock:
            assert self.proc.stdin is not None
            started = time.monotonic()
            self.proc.stdin.write("\t".join(argv) + "\n")
            self.proc.stdin.flush()
            lines, status = self._collect(timeout)
        result = Result(argv, "\n".join(lines).strip("\n"), status.strip(), time.monotonic() - started)
        self.history.append((argv, result.seconds))
        return result

    def ok(self, *args: str, namesrv: bool = True, timeout: float = 90.0) -> Result:
        """:meth:`run`, raising :class:`MQAdminError` unless it ended normally without a stack trace."""
        result = self.run(*args, namesrv=namesrv, timeout=timeout)
        if result.status != "ok" or _FAILURE.search(result.output):
            raise MQAdminError(str(result))
        return result

    def client(self, *args: str, timeout: float = 90.0) -> Result:
        """A shell request for a client (``@produce``, ``@consume``, ``@received``, ``@stop``)."""
        return self.ok(*args, namesrv=False, timeout=timeout)

    def close(self) -> None:
        """End the JVM (its clients shut down first)."""
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def jars() -> Path:
    """The folder of Apache RocketMQ's jars (``bench/compare/java.ensure_jars``) once Java is
    there too; fails the test saying what is missing otherwise."""
    import pytest

    try:
        java.java()
        return java.ensure_jars()
    except java.JavaSetupError as exc:
        pytest.fail(f"Apache RocketMQ's jars or Java are not available: {exc}", pytrace=False)


def run_once(lib: Path, home: Path, *args: str, jvm: tuple[str, ...] = (), attempts: int = 1,
             timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``mqadmin <args>`` in a JVM of its own (``MQAdminStartup``, the jars of ``lib``), with
    ``user.home`` and ``rocketmq.home.dir`` at ``home`` (made if missing; ``conf/tools.yml`` there
    holds the keys mqadmin signs with) and the extra JVM options ``jvm``. mqadmin waits a fixed time
    for an answer (not settable): a run that reports ``RemotingTimeoutException`` is run again, up to
    ``attempts`` runs in all. The last run's result (``timeout`` seconds each at most, else
    ``subprocess.TimeoutExpired``)."""
    home.mkdir(parents=True, exist_ok=True)
    argv = [java.java(), "-Xms64m", "-Xmx256m", java.QUIET_LOGBACK, f"-Drocketmq.home.dir={home}",
            f"-Duser.home={home}", *jvm, "-cp", java.classpath(lib),
            "org.apache.rocketmq.tools.command.MQAdminStartup", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    for _ in range(attempts - 1):
        if "RemotingTimeoutException" not in done.stdout + done.stderr:
            break
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    return done


def run_ok(lib: Path, home: Path, *args: str, jvm: tuple[str, ...] = (), attempts: int = 1,
           timeout: float = 120.0) -> str:
    """:func:`run_once`'s stdout; raises ``AssertionError`` (with the output) unless it exited 0
    without saying ``command failed``."""
    done = run_once(lib, home, *args, jvm=jvm, attempts=attempts, timeout=timeout)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "command failed" not in out.lower(), f"mqadmin {' '.join(args)}:\n{out}"
    return done.stdout


def fields(out: str) -> dict[str, str]:
    """``#Key<TAB>value`` lines of mqadmin output (``getControllerMetaData``, ``getSyncStateSet``,
    ``getBrokerEpoch``; the last one of a key wins)."""
    found: dict[str, str] = {}
    for line in out.splitlines():
        m = re.match(r"^#([A-Za-z]+):?\t(.*)$", line.strip())
        if m:
            found[m.group(1)] = m.group(2).strip()
    return found


_REPLICA = re.compile(r"(InSyncReplica|NotInSyncReplica):\s+ReplicaIdentity\{brokerName='[^']*', brokerId=(\d+), "
                      r"brokerAddress='([^']*)', alive=(true|false)\}")


def replicas(out: str) -> list[tuple[str, int, str, bool]]:
    """``(InSyncReplica|NotInSyncReplica, brokerId, brokerAddress, alive)`` rows of ``mqadmin
    getSyncStateSet`` (Apache's ``GetSyncStateSetSubCommand`` prints each ``ReplicaIdentity``), by brokerId."""
    return sorted(((m.group(1), int(m.group(2)), m.group(3), m.group(4) == "true") for m in _REPLICA.finditer(out)),
                  key=lambda r: r[1])
