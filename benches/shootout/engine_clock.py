#!/usr/bin/env python3
"""The shootout's one engine clock: run an engine command, append its wall time.

    engine_clock.py LOG -- COMMAND [ARGS...]

Every contestant's engine runs go through this wrapper (the orchestrator's
through its config's bench argv, the tuners' through the harness), so engine
time is counted the same way for all of them: spawn to reap of COMMAND,
measured here, appended to LOG as one line

    <unix end time> <wall seconds> <exit code> <tag>

(tag: $SHOOTOUT_TAG or "-"). The exit code is passed on, a signal that kills
the wrapper is passed to the engine first, and the line is one O_APPEND write,
so concurrent writers never interleave. Stdlib only: it starts in ~20 ms.
"""

import os
import signal
import sys
import time


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.stderr.write("usage: engine_clock.py LOG -- COMMAND [ARGS...]\n")
        return 2
    log, argv = sys.argv[1], sys.argv[3:]
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            sys.stderr.write(f"engine_clock: cannot run {argv[0]}: {e}\n")
            os._exit(127)

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, forward)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    wall = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    tag = os.environ.get("SHOOTOUT_TAG", "-").replace(" ", "_") or "-"
    line = f"{time.time():.3f} {wall:.6f} {code} {tag}\n".encode()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    if code < 0:
        # Killed by a signal: die the same way, so the caller sees it.
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code if code >= 0 else 1


if __name__ == "__main__":
    sys.exit(main())
