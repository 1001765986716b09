"""A small child process for the transport tests.

echo_child.py echo [N]         N lines to stderr, then echo stdin lines to stdout until EOF
echo_child.py stderr-flood N   N bytes of 1 KiB lines to stderr, "flood done" on stdout, echo
echo_child.py env              its initial environment as JSON on stdout, then exit
echo_child.py stubborn         ignore SIGTERM and stdin EOF; "ready" on stdout; never exit
echo_child.py ignore-eof       ignore stdin EOF (but not SIGTERM); "ready" on stdout
echo_child.py cwd              its working directory on stdout, then exit
echo_child.py grandchild       start a sleeping grandchild that holds our stderr open, print
                               its pid on stdout, then echo
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys


def echo() -> None:
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        out.write(line)
        out.flush()
    sys.stderr.write("stderr bye\n")


def initial_environment() -> dict[str, str]:
    # /proc shows the environment exactly as exec() received it; Python itself may add to
    # os.environ at start-up (LC_CTYPE coercion), which would blur the inherit_env tests.
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return dict(os.environ)
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if item:
            key, _, value = item.partition(b"=")
            env[key.decode()] = value.decode()
    return env


def main() -> None:
    mode = sys.argv[1]
    if mode == "echo":
        for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 0):
            sys.stderr.write(f"stderr line {i}\n")
        sys.stderr.flush()
        echo()
    elif mode == "stderr-flood":
        total = int(sys.argv[2])
        line = b"x" * 1023 + b"\n"
        err = sys.stderr.buffer
        for _ in range(total // len(line)):
            err.write(line)
        err.flush()
        sys.stdout.buffer.write(b"flood done\n")
        sys.stdout.flush()
        echo()
    elif mode == "env":
        sys.stdout.write(json.dumps(initial_environment()) + "\n")
    elif mode == "cwd":
        sys.stdout.write(os.getcwd() + "\n")
    elif mode in ("stubborn", "ignore-eof"):
        if mode == "stubborn":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        sys.stdin.buffer.read()
        while True:
            signal.pause()
    elif mode == "grandchild":
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        sys.stdout.write(f"{child.pid}\n")
        sys.stdout.flush()
        echo()
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
