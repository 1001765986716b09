"""What every peer script shares: the scenarios' client side, the wire constants, the output.

Stdlib only: the official SDK's venv has neither msgspec nor our ``acp``.

A client script is run as ``<client>.py SCENARIO N``; it spawns its agent, runs the scenario
and prints one JSON line on stdout: ``{"metrics": {...}, "count": K}`` (K: operations checked,
which must equal N) or ``{"unavailable": "why"}``. The throughput scenarios also report
``client_cpu_us`` and ``agent_cpu_us``: CPU time (user+sys, all threads) each process spent
over the timed part, per operation (see ``CpuMeter``). The agent is told what to do by the prompt
text: ``stream N`` (N agent_message_chunk updates), ``read N PATH`` (N fs/read_text_file calls),
anything else answers end_turn at once.

``read`` follows the yardstick's contract (../shared/yardstick/benchspec.py: the prompt text,
the path, the 1 KiB answer), so that a cross pair runs: ``ACP_BENCH_AGENT="cmd ..."`` makes
``ours_client.py`` / ``conn_client.py`` spawn that agent instead of their own (say the
yardstick's lf agent), and the yardstick's client drives our agents (see benchmarks/README.md,
"Fifth pass"). Only the rtt and read scenarios cross: the streamed chunks differ.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import shlex
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

SCENARIOS = ("rtt", "stream", "read", "sessions", "concurrent", "startup", "memory", "large")
CONCURRENCY = 8
READ_PATH = "/acp-bench/virtual-1k.txt"  # never opened: the client answers with FILE_CONTENT
FILE_CONTENT = "0123456789abcdef" * 64  # 1 KiB, the yardstick's answer too
CWD = "/tmp"
WARMUP_PROMPTS = 20
MIB = 1 << 20
WARM_BYTES = 1024  # the large scenario's warm-up read and update
BIG_PREFIX = "/acp-bench/big-"  # + the size in bytes + ".txt": the client answers that many bytes


def agent_command(default: list[str]) -> list[str]:
    """The agent a client spawns: ``default``, or the command in ``ACP_BENCH_AGENT`` (a cross pair)."""
    override = os.environ.get("ACP_BENCH_AGENT")
    return shlex.split(override) if override else default


def parse_args() -> tuple[str, int]:
    """``SCENARIO N`` from the command line (``large-10``: the large scenario, N MiB)."""
    scenario = sys.argv[1].split("-")[0] if len(sys.argv) == 3 else ""
    if scenario not in SCENARIOS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(SCENARIOS)}}} N")
    return scenario, int(sys.argv[2])


def emit(metrics: dict[str, float], count: int) -> None:
    print(json.dumps({"metrics": metrics, "count": count}), flush=True)


def unavailable(reason: str) -> None:
    print(json.dumps({"unavailable": reason}), flush=True)
    sys.exit(0)


def agent_reply(text: str) -> tuple[str, int]:
    """What the agent does for a prompt: ("stream" | "read" | "big_read" | "big_update" |
    "answer", n). ``big_read SIZE``: one fs/read_text_file of :func:`big_path` (SIZE bytes);
    ``big_update SIZE``: one agent_message_chunk of :func:`big_text` (SIZE bytes)."""
    command, _, arg = text.partition(" ")
    if command in ("stream", "read", "big_read", "big_update"):
        return command, int(arg.split()[0])  # "read N PATH": the path is READ_PATH
    return "answer", 0


def big_path(size: int) -> str:
    return f"{BIG_PREFIX}{size}.txt"


@functools.cache
def big_text(size: int) -> str:
    """SIZE bytes of text (made once per process: not timed as protocol work)."""
    return "x" * size


def read_answer(path: str) -> str:
    """The file content a client answers for ``path``: 1 KiB, or a big_read's SIZE bytes."""
    return FILE_CONTENT if path == READ_PATH else big_text(int(path[len(BIG_PREFIX):-len(".txt")]))


class LineBuffer:
    """The asyncio peers' framing: the whole lines of each read. A long line arriving over many
    reads is kept as pieces and joined once (``buffer + data`` on every read is quadratic)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.pieces: list[bytes] = []

    def feed(self, data: bytes) -> list[bytes]:
        if b"\n" not in data:
            self.pieces.append(data)
            return []
        if self.pieces:
            data = b"".join(self.pieces) + data
            self.pieces.clear()
        *lines, self.buffer = (self.buffer + data).split(b"\n")
        return lines


class ChunkCounter:
    """Counts streamed chunks (texts "0", "1", ...) and how many arrived out of order."""

    def __init__(self) -> None:
        self.count = 0
        self.disorder = 0

    def __call__(self, text: str) -> None:
        if text != str(self.count):
            self.disorder += 1
        self.count += 1


# ---------------------------------------------------------------------- the agent process


def agent_pid() -> int:
    """The pid of this process's only child (the agent), found in /proc."""
    me = str(os.getpid())
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[1] == me:  # field 4: ppid
                children.append(int(entry))
    if len(children) != 1:
        raise RuntimeError(f"expected one agent process, found children {children}")
    return children[0]


def peak_rss_mib(pid: int) -> float:
    """VmHWM (peak resident set size) of ``pid`` in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/<pid>/status")


class CpuMeter:
    """CPU time (user+sys, every thread) of this process and of the agent over the timed part.

    Both sides are read on the same kernel clock, the process CPU-time clock (the exact sum of
    the threads' run time, in ns): ``CLOCK_PROCESS_CPUTIME_ID`` for this process and
    ``clock_getcpuclockid(agent)`` for the agent, which the client, as its parent, may read at
    any time. So no agent has to report anything (the official one could not without a protocol
    extension), and the figure is precise even for a timed part of a few milliseconds, where
    /proc/<pid>/stat (in 10 ms ticks) would round it away. Nothing is read inside the timed loop.
    """

    def __init__(self, pid: int | None = None) -> None:
        self.agent_clock = _cpu_clock(agent_pid() if pid is None else pid)
        self.client0 = self.agent0 = 0.0

    def start(self) -> None:
        self.agent0 = time.clock_gettime(self.agent_clock)
        self.client0 = time.process_time()

    def stop(self, n: int) -> dict[str, float]:
        """``client_cpu_us`` and ``agent_cpu_us`` per operation since ``start``."""
        client = time.process_time() - self.client0
        agent = time.clock_gettime(self.agent_clock) - self.agent0
        return {"client_cpu_us": client / n * 1e6, "agent_cpu_us": agent / n * 1e6}


def _cpu_clock(pid: int) -> int:
    clock = ctypes.c_int()
    error = ctypes.CDLL(None, use_errno=True).clock_getcpuclockid(pid, ctypes.byref(clock))
    if error:
        raise OSError(error, f"clock_getcpuclockid({pid}): {os.strerror(error)}")
    return clock.value


# ---------------------------------------------------------------------- blocking clients


class SyncBenchClient(Protocol):
    """What a blocking client adapter offers the scenario driver."""

    chunks: ChunkCounter
    reads: int

    def initialize(self) -> None: ...
    def new_session(self) -> str: ...
    def prompt(self, session_id: str, text: str) -> str: ...
    def prepare_concurrency(self) -> None: ...  # called before prompts come from many threads
    def close(self) -> None: ...


def run_sync(scenario: str, n: int, open_client: Callable[[], SyncBenchClient]) -> None:
    """Run ``scenario`` with a blocking client adapter and emit its figures."""
    start = time.perf_counter()
    client = open_client()
    try:
        client.initialize()
        if scenario == "startup":
            emit({"startup_ms": (time.perf_counter() - start) * 1000}, 1)
            return
        metrics, count = _SYNC_SCENARIOS[scenario](client, n)
    finally:
        client.close()
    emit(metrics, count)


def _warm(client: SyncBenchClient) -> str:
    session_id = client.new_session()
    for _ in range(WARMUP_PROMPTS):
        client.prompt(session_id, "warm")
    return session_id


def _rtt(client: SyncBenchClient, n: int) -> tuple[dict[str, float], int]:
    session_id = _warm(client)
    prompt = client.prompt
    ok = 0
    cpu = CpuMeter()
    cpu.start()
    start = time.perf_counter()
    for _ in range(n):
        ok += prompt(session_id, "hello") == "end_turn"
    elapsed = time.perf_counter() - start
    return {"prompts_per_s": n / elapsed, **cpu.stop(n)}, ok


def _stream(client: SyncBenchClient, n: int) -> tuple[dict[str, float], int]:
    session_id = _warm(client)
    cpu = CpuMeter()
    cpu.start()
    start = time.perf_counter()
    stop = client.prompt(session_id, f"stream {n}")
    elapsed = time.perf_counter() - start
    metrics = {"chunks_per_s": n / elapsed, **cpu.stop(n)}
    chunks = client.chunks
    ok = stop == "end_turn" and chunks.disorder == 0
    return metrics, chunks.count if ok else -1


def _read(client: SyncBenchClient, n: int) -> tuple[dict[str, float], int]:
    session_id = _warm(client)
    cpu = CpuMeter()
    cpu.start()
    start = time.perf_counter()
    stop = client.prompt(session_id, f"read {n} {READ_PATH}")  # end_turn iff every read was 1 KiB
    elapsed = time.perf_counter() - start
    metrics = {"reads_per_s": n / elapsed, **cpu.stop(n)}
    return metrics, client.reads if stop == "end_turn" else -1


def _sessions(client: SyncBenchClient, n: int) -> tuple[dict[str, float], int]:
    _warm(client)
    ok = 0
    cpu = CpuMeter()
    cpu.start()
    start = time.perf_counter()
    for _ in range(n):
        ok += client.prompt(client.new_session(), "hello") == "end_turn"
    elapsed = time.perf_counter() - start
    return {"sessions_per_s": n / elapsed, **cpu.stop(n)}, ok


def _concurrent(client: SyncBenchClient, n: int) -> tuple[dict[str, float], int]:
    _warm(client)
    sessions = [client.new_session() for _ in range(CONCURRENCY)]
    client.prepare_concurrency()
    shares = [n // CONCURRENCY + (i < n % CONCURRENCY) for i in range(CONCURRENCY)]
    done = [0] * CONCURRENCY
    barrier = threading.Barrier(CONCURRENCY + 1)

    def worker(index: int) -> None:
        session_id = sessions[index]
        barrier.wait()
        for _ in range(shares[index]):
            done[index] += client.prompt(session_id, "hello") == "end_turn"

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(CONCURRENCY)]
    cpu = CpuMeter()
    for thread in threads:
        thread.start()
    cpu.start()  # the workers are parked at the barrier
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    return {"prompts_per_s": n / elapsed, **cpu.stop(n)}, sum(done)


def _memory(client: SyncBenchClient, n: int) -> tuple[dict[str, float], int]:
    pid = agent_pid()
    client.new_session()
    idle = peak_rss_mib(pid)
    for _ in range(n - 1):
        client.new_session()
    return {"rss_idle_mib": idle, "rss_sessions_mib": peak_rss_mib(pid)}, n


def _large(client: SyncBenchClient, n: int) -> tuple[dict[str, float], int]:
    """One fs/read_text_file answer of N MiB, then one session/update of N MiB."""
    session_id = _warm(client)
    # A small read and update first: what a process does once (typed decoders built on first
    # use, ~6 ms for our first session/update) is not what this scenario measures.
    client.prompt(session_id, f"big_read {WARM_BYTES}")
    client.prompt(session_id, f"big_update {WARM_BYTES}")
    size = n * MIB
    big_text(size)  # made before the timed part, on both sides (the agent at its first use)
    pids = (os.getpid(), agent_pid())
    before = [peak_rss_mib(pid) for pid in pids]
    start = time.perf_counter()
    read_ok = client.prompt(session_id, f"big_read {size}") == "end_turn"
    read_s = time.perf_counter() - start
    chunks = client.chunks.count
    start = time.perf_counter()
    update_ok = client.prompt(session_id, f"big_update {size}") == "end_turn"
    update_s = time.perf_counter() - start
    return _large_metrics(n, read_s, update_s, pids, before), n if read_ok and update_ok and client.chunks.count == chunks + 1 else -1


def _large_metrics(n: int, read_s: float, update_s: float, pids: tuple[int, int], before: list[float]) -> dict[str, float]:
    """MiB/s each way, and how much each side's peak RSS grew, as a multiple of the message."""
    client_growth, agent_growth = (peak_rss_mib(pid) - was for pid, was in zip(pids, before, strict=True))
    return {"read_mib_s": n / read_s, "update_mib_s": n / update_s,
            "client_rss_x": client_growth / n, "agent_rss_x": agent_growth / n}


_SYNC_SCENARIOS: dict[str, Callable[[SyncBenchClient, int], tuple[dict[str, float], int]]] = {
    "rtt": _rtt,
    "stream": _stream,
    "read": _read,
    "sessions": _sessions,
    "concurrent": _concurrent,
    "memory": _memory,
    "large": _large,
}


# ---------------------------------------------------------------------- asyncio clients


class AsyncBenchClient(Protocol):
    """What an asyncio client adapter offers the scenario driver (the concurrent scenario runs
    8 tasks instead of 8 threads)."""

    chunks: ChunkCounter
    reads: int

    async def initialize(self) -> None: ...
    async def new_session(self) -> str: ...
    async def prompt(self, session_id: str, text: str) -> str: ...
    async def close(self) -> None: ...


def run_async(scenario: str, n: int, open_client: Callable[[], Awaitable[AsyncBenchClient]]) -> None:
    """Run ``scenario`` with an asyncio client adapter (in a new event loop) and emit its figures."""
    import asyncio

    async def main() -> tuple[dict[str, float], int]:
        start = time.perf_counter()
        client = await open_client()
        try:
            await client.initialize()
            if scenario == "startup":
                return {"startup_ms": (time.perf_counter() - start) * 1000}, 1
            return await getattr(_AsyncDriver(client), scenario)(n)  # type: ignore[no-any-return]
        finally:
            await client.close()

    emit(*asyncio.run(main()))


Metrics = tuple[dict[str, float], int]


class _AsyncDriver:
    def __init__(self, client: AsyncBenchClient) -> None:
        self.client = client

    async def warm(self) -> str:
        session_id = await self.client.new_session()
        for _ in range(WARMUP_PROMPTS):
            await self.client.prompt(session_id, "warm")
        return session_id

    async def rtt(self, n: int) -> Metrics:
        session_id = await self.warm()
        ok = 0
        cpu = CpuMeter()
        cpu.start()
        start = time.perf_counter()
        for _ in range(n):
            ok += await self.client.prompt(session_id, "hello") == "end_turn"
        elapsed = time.perf_counter() - start
        return {"prompts_per_s": n / elapsed, **cpu.stop(n)}, ok

    async def stream(self, n: int) -> Metrics:
        session_id = await self.warm()
        cpu = CpuMeter()
        cpu.start()
        start = time.perf_counter()
        stop = await self.client.prompt(session_id, f"stream {n}")
        elapsed = time.perf_counter() - start
        metrics = {"chunks_per_s": n / elapsed, **cpu.stop(n)}
        chunks = self.client.chunks
        ok = stop == "end_turn" and chunks.disorder == 0
        return metrics, chunks.count if ok else -1

    async def read(self, n: int) -> Metrics:
        session_id = await self.warm()
        cpu = CpuMeter()
        cpu.start()
        start = time.perf_counter()
        stop = await self.client.prompt(session_id, f"read {n} {READ_PATH}")
        elapsed = time.perf_counter() - start
        metrics = {"reads_per_s": n / elapsed, **cpu.stop(n)}
        return metrics, self.client.reads if stop == "end_turn" else -1

    async def sessions(self, n: int) -> Metrics:
        await self.warm()
        ok = 0
        cpu = CpuMeter()
        cpu.start()
        start = time.perf_counter()
        for _ in range(n):
            ok += await self.client.prompt(await self.client.new_session(), "hello") == "end_turn"
        elapsed = time.perf_counter() - start
        return {"sessions_per_s": n / elapsed, **cpu.stop(n)}, ok

    async def concurrent(self, n: int) -> Metrics:
        import asyncio

        await self.warm()
        sessions = [await self.client.new_session() for _ in range(CONCURRENCY)]
        shares = [n // CONCURRENCY + (i < n % CONCURRENCY) for i in range(CONCURRENCY)]

        async def worker(session_id: str, share: int) -> int:
            return sum([await self.client.prompt(session_id, "hello") == "end_turn" for _ in range(share)])

        cpu = CpuMeter()
        cpu.start()
        start = time.perf_counter()
        done = await asyncio.gather(*(worker(s, k) for s, k in zip(sessions, shares, strict=True)))
        elapsed = time.perf_counter() - start
        return {"prompts_per_s": n / elapsed, **cpu.stop(n)}, sum(done)

    async def large(self, n: int) -> Metrics:
        session_id = await self.warm()
        await self.client.prompt(session_id, f"big_read {WARM_BYTES}")  # as in _large
        await self.client.prompt(session_id, f"big_update {WARM_BYTES}")
        size = n * MIB
        big_text(size)
        pids = (os.getpid(), agent_pid())
        before = [peak_rss_mib(pid) for pid in pids]
        start = time.perf_counter()
        read_ok = await self.client.prompt(session_id, f"big_read {size}") == "end_turn"
        read_s = time.perf_counter() - start
        chunks = self.client.chunks.count
        start = time.perf_counter()
        update_ok = await self.client.prompt(session_id, f"big_update {size}") == "end_turn"
        update_s = time.perf_counter() - start
        ok = read_ok and update_ok and self.client.chunks.count == chunks + 1
        return _large_metrics(n, read_s, update_s, pids, before), n if ok else -1

    async def memory(self, n: int) -> Metrics:
        pid = agent_pid()
        await self.client.new_session()
        idle = peak_rss_mib(pid)
        for _ in range(n - 1):
            await self.client.new_session()
        return {"rss_idle_mib": idle, "rss_sessions_mib": peak_rss_mib(pid)}, n
