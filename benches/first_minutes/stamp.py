#!/usr/bin/env python3
"""Runs a command and writes each line it prints (stdout and stderr) with
the seconds since its start, and the 1-minute load average every 15 s;
stops it with SIGINT after LIMIT seconds (as a person's Ctrl-C would).

    python3 benches/first_minutes/stamp.py LIMIT LOG COMMAND [ARGS...]

This is how docs/measured/first_ten_minutes.md times a newcomer's command 1:
the first verdict, the first experiment's verdict and the first staged win,
read off the stamped log. Exit status: the command's (130 after the SIGINT
is the expected end).
"""

import os
import signal
import subprocess
import sys
import threading
import time


def load1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def main(argv):
    if len(argv) < 4:
        sys.exit(f"usage: {argv[0]} LIMIT LOG COMMAND [ARGS...]")
    try:
        limit = float(argv[1])
    except ValueError:
        sys.exit(f"LIMIT must be a number of seconds, got {argv[1]!r}")
    log = open(argv[2], "w", buffering=1)
    t0 = time.monotonic()
    lock = threading.Lock()

    def write(line):
        with lock:
            stamped = f"{time.monotonic() - t0:8.1f} {line}"
            log.write(stamped)
            sys.stdout.write(stamped)
            sys.stdout.flush()

    write(f"# {' '.join(argv[3:])}; load average {load1():.2f}\n")
    p = subprocess.Popen(argv[3:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = threading.Event()

    def sample():
        while not done.wait(15.0):
            write(f"# load average {load1():.2f}\n")

    def stop():
        if not done.wait(limit):
            write(f"# SIGINT after {limit:.0f} s\n")
            p.send_signal(signal.SIGINT)

    for f in (sample, stop):
        threading.Thread(target=f, daemon=True).start()
    for line in p.stdout:
        write(line)
    code = p.wait()
    done.set()
    write(f"# exit {code}; load average {load1():.2f}\n")
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
