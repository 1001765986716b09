"""Python calls per operation, in both processes of a peer pair (deterministic, unlike CPU time).

    python benchmarks/count_calls.py SCENARIO [--client peers/ours_client.py] [--tree SRC] [-n N] [--top K]

Runs the client script twice, with N and 3N operations, with a profile hook (``sys.setprofile``
and ``threading.setprofile``, installed by a ``sitecustomize`` on ``PYTHONPATH``) in the client
and in the agent it spawns. Each process counts ``call`` events (Python functions, generator
resumes included) and ``c_call`` events (builtins) per function; the counts of the small run are
subtracted from those of the big one and divided by 2N, which cancels start-up, imports, warm-up
and close. ``--tree`` puts another source tree (a ``git worktree`` of an older commit) first on
``PYTHONPATH``, to count that commit with the same peers. The hook makes everything several
times slower, so timing-dependent paths (write batching, leader/follower hand-overs) may be
taken a little more or less often than in a timed run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Installed in both processes through PYTHONPATH; dumps its counts at exit.
_SITECUSTOMIZE = '''
import atexit, collections, json, os, sys, threading
_py = collections.Counter()
_c = collections.Counter()
def _profile(frame, event, arg):
    if event == "call":
        code = frame.f_code
        _py["/".join(code.co_filename.rsplit("/", 2)[-2:]) + ":" + code.co_name] += 1
    elif event == "c_call":
        _c[getattr(arg, "__qualname__", "?")] += 1
threading.setprofile(_profile)
sys.setprofile(_profile)
def _dump():
    sys.setprofile(None)
    out = os.environ["ACP_COUNT_CALLS_OUT"] + "." + os.path.basename(sys.argv[0] or "python")
    with open(out, "w") as f:
        json.dump({"py": _py, "c": _c}, f)
atexit.register(_dump)
'''


def run(client: Path, scenario: str, n: int, tree: str | None, workdir: Path) -> dict[str, dict[str, collections.Counter[str]]]:
    """Run ``client SCENARIO n`` under the hook; the counts of each process by script name."""
    out = workdir / f"counts-{n}"
    path = [str(workdir)] + ([tree] if tree else []) + [os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p), ACP_COUNT_CALLS_OUT=str(out))
    subprocess.run([sys.executable, str(client), scenario, str(n)], env=env, check=True,
                   stdout=subprocess.DEVNULL, cwd=client.parent)
    counts = {}
    for dump in workdir.glob(f"counts-{n}.*"):
        data = json.loads(dump.read_text())
        counts[dump.name.split(".", 1)[1]] = {k: collections.Counter(v) for k, v in data.items()}
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", choices=["rtt", "read", "sessions", "stream"])
    parser.add_argument("--client", type=Path, default=HERE / "peers" / "ours_client.py")
    parser.add_argument("--tree", help="a source tree to import acp from (e.g. a worktree of an older commit)")
    parser.add_argument("-n", type=int, help="operations in the small run (the big one has 3N; default 500, stream 5000)")
    parser.add_argument("--top", type=int, default=25, help="functions listed per process")
    args = parser.parse_args()
    n = args.n or (5000 if args.scenario == "stream" else 500)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        small = run(args.client.resolve(), args.scenario, n, args.tree, workdir)
        big = run(args.client.resolve(), args.scenario, 3 * n, args.tree, workdir)
    ops = 2 * n
    for name in sorted(big):
        py = big[name]["py"]
        py.subtract(small.get(name, {}).get("py", collections.Counter()))
        c = big[name]["c"]
        c.subtract(small.get(name, {}).get("c", collections.Counter()))
        print(f"== {name}: {sum(py.values()) / ops:.1f} Python calls, {sum(c.values()) / ops:.1f} builtin calls per operation")
        for function, count in py.most_common(args.top):
            if count / ops >= 0.05:
                print(f"   {count / ops:6.2f}  {function}")


if __name__ == "__main__":
    main()
