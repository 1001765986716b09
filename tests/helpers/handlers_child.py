"""A small command for the LocalTerminals tests.

handlers_child.py echo WORDS...     print the words to stdout and "err" to stderr, exit 0
handlers_child.py exit N            print "bye", exit with status N
handlers_child.py env NAME          print the value of $NAME (or "<unset>")
handlers_child.py cwd               print the working directory
handlers_child.py utf8 N            write "é" N times (2 bytes each) in odd-sized chunks, then "END"
handlers_child.py sleep             print "ready", then sleep until killed
handlers_child.py spawn             start a sleeping grandchild (same process group), print
                                    "child <pid>", then sleep until killed
handlers_child.py escape            start a grandchild in its own session that keeps stdout open,
                                    print "child <pid>", then exit 0
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def forever() -> None:
    while True:
        time.sleep(3600)


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    out = sys.stdout
    if mode == "echo":
        out.write(" ".join(args) + "\n")
        out.flush()
        sys.stderr.write("err\n")
        sys.stderr.flush()
    elif mode == "exit":
        out.write("bye\n")
        out.flush()
        sys.exit(int(args[0]))
    elif mode == "env":
        out.write(os.environ.get(args[0], "<unset>") + "\n")
    elif mode == "cwd":
        out.write(os.getcwd() + "\n")
    elif mode == "utf8":
        data = ("é" * int(args[0])).encode("utf-8")
        raw = sys.stdout.buffer
        # Odd chunk sizes so characters are split across writes (and reads).
        for i in range(0, len(data), 333):
            raw.write(data[i : i + 333])
            raw.flush()
        raw.write(b"END")
        raw.flush()
    elif mode == "sleep":
        out.write("ready\n")
        out.flush()
        forever()
    elif mode in ("spawn", "escape"):
        child = subprocess.Popen(
            [sys.executable, "-c", "import time\nwhile True: time.sleep(3600)"],
            start_new_session=(mode == "escape"),
        )
        out.write(f"child {child.pid}\n")
        out.flush()
        if mode == "spawn":
            forever()
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
