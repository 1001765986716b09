"""A third runtime over the sans-I/O core, to prove the core is the core: one thread, one
``selectors`` loop, every handler run inline. About 200 lines: everything it knows about JSON-RPC
comes from ``acp.rpc.Scheduler``; it only reads, writes, waits and keeps time.

Without threads, a handler runs to its end before anything else happens, so what needs
concurrency (a request handler waiting for a peer while another runs, backpressure against a
slow consumer) is out of its reach; a blocking call pumps the loop until its answer arrives,
which is enough for a handler's own calls (the deadlock rule) and for timeouts.
"""

from __future__ import annotations

import os
import select
import selectors
import subprocess
import time
from collections.abc import Callable
from typing import Any

from acp import rpc
from acp.errors import ConnectionClosedError
from acp.rpc import scheduler as sched


class SelectorCall(rpc.InboundRequest):
    """An inbound request; cancellation is a flag the inline handler can look at."""

    __slots__ = ("cancelled",)

    def __init__(self, call_id: rpc.RequestId, method: str) -> None:
        super().__init__(call_id, method)
        self.cancelled = False


class SelectorConnection:
    """A JSON-RPC connection over two file descriptors, driven by :meth:`pump`."""

    def __init__(self, read_fd: int, write_fd: int, *, ordering: rpc.Ordering = "connection",
                 request_timeout: float | None = 30.0, max_message_bytes: int = rpc.DEFAULT_MAX_LINE_BYTES) -> None:
        self.sched = rpc.Scheduler(SelectorCall, name="selector", ordering=ordering, max_line_bytes=max_message_bytes)
        self.read_fd, self.write_fd = read_fd, write_fd
        os.set_blocking(read_fd, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(read_fd, selectors.EVENT_READ)
        self.request_timeout = request_timeout
        self.woken: list[Any] = []
        self.serial = False  # True while a drainer handles a notification (the deadlock rule)
        self.eof = False

    # registration: the scheduler's own
    def on_request(self, method: str, fn: Callable[[Any, SelectorCall], Any], params_type: Any = None) -> None:
        self.sched.on_request(method, fn, params_type)

    def on_notification(self, method: str, fn: Callable[[Any], None], params_type: Any = None) -> None:
        self.sched.on_notification(method, fn, params_type)

    # ------------------------------------------------------------------ outbound

    def request(self, method: str, params: Any = None, timeout: float | None = -1.0) -> Any:
        """Send a request and pump the loop until its answer, its deadline or the end."""
        timeout = self.request_timeout if timeout == -1.0 else timeout
        now = time.monotonic()
        pending, data = self.sched.send_request(method, params, None, None, self.serial, timeout, now)
        self.write(data)
        while pending.raw is None and pending.error is None:
            deadline = self.sched.next_deadline()
            self.pump(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if deadline is not None and time.monotonic() >= deadline:
                self.sched.expire(time.monotonic())
                self.write(self.sched.data_to_send())
            if self.eof and pending.raw is None and pending.error is None:
                raise ConnectionClosedError("connection closed by peer")
        return rpc.Endpoint.outcome(pending)

    def notify(self, method: str, params: Any = None) -> None:
        # No batching bound to keep here: write at once (FLUSH_SOON means "soon").
        self.sched.notify(method, params)
        self.write(self.sched.data_to_send())

    def write(self, data: bytes | None) -> None:
        view = memoryview(data or b"")
        while view:
            try:
                view = view[os.write(self.write_fd, view):]
            except BlockingIOError:
                select.select([], [self.write_fd], [])

    # ------------------------------------------------------------------ the loop

    def pump(self, timeout: float | None = 0.0) -> bool:
        """Wait up to ``timeout`` for input and handle everything it brings; False at the end."""
        if self.eof:
            return False
        if not self.selector.select(timeout):
            return True
        try:
            data = os.read(self.read_fd, 65536)
        except BlockingIOError:
            return True
        if not data:
            self._eof()
            return False
        self.receive(data)
        return True

    def run_until(self, done: Callable[[], bool], timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while not done():
            if time.monotonic() > end:
                raise TimeoutError("condition not met")
            if not self.pump(0.05) and not done():
                raise ConnectionClosedError("the peer went away")

    def receive(self, data: bytes) -> None:
        msgs = self.sched.decode_read(data)
        resume = 0
        while True:
            now = self.sched.route(msgs, resume) or []
            routed = self.sched.routed
            if routed is not None:
                self.write(self.sched.data_to_send())
                for call in routed.cancelled:
                    call.cancelled = True  # type: ignore[attr-defined]
            for item in now:
                if type(item) is not rpc.Pending:  # a Pending's outcome is set: its caller sees it
                    self.run_request(item)
            self.drain_woken()
            if routed is None or routed.hook is None:
                return
            hook, resume = routed.hook, routed.resume
            if type(hook) is rpc.Decoded:
                self.run_notification(hook)
                continue
            try:
                hook[1].on_arrival(hook[3], hook[0])
                refused = None
            except Exception as exc:
                refused = exc
            if (routed.placed and refused is None) or self.sched.arrived(hook, refused):  # type: ignore[union-attr]
                self.run_request(hook)
            self.write(self.sched.data_to_send())

    def drain_woken(self) -> None:
        """Drain every lane the scheduler woke, here and now (there is no other thread)."""
        self.woken += self.sched.pop_woken()
        while self.woken:
            key = self.woken.pop(0)
            while (items := self.sched.take(key)) is not None:
                for item in items:
                    self.handle(item)
                self.woken += self.sched.pop_woken()

    def handle(self, item: Any) -> None:
        if type(item) is rpc.Updates:
            for params in item:
                self.run_notification(rpc.Decoded(item.handler, params, item.method))
        elif type(item) is rpc.Decoded:
            self.run_notification(item)
        elif type(item) is tuple:
            if self.sched.startable(item):
                self.run_request(item)
        elif type(item) in (rpc.Response, rpc.ErrorResponse):
            self.sched.deliver(item)  # the outcome is set; the pumping caller sees it
        elif item is sched.EOF:
            self.sched.eof_reached()  # the outcomes are set; the pumping caller sees them
            self.eof = True

    def run_notification(self, item: rpc.Decoded) -> None:
        was, self.serial = self.serial, True
        try:
            item.handler.fn(item.method, item.params) if item.fallback else item.handler.fn(item.params)
        except BaseException as exc:
            self.sched.notification_failed(item.method, exc)
        finally:
            self.serial = was

    def run_request(self, start: rpc.Start) -> None:
        was, self.serial = self.serial, False
        try:
            fn, args = self.sched.endpoint.request_params(start)
            data = self.sched.answer(start[0], fn(*args))
        except BaseException as exc:
            data = self.sched.request_failed(start[0], exc)
        finally:
            self.serial = was
        self.write(data)

    def _eof(self) -> None:
        self.sched.receive_eof()
        self.drain_woken()
        self.eof = True

    def close(self) -> None:
        self.sched.close()
        self.write(self.sched.data_to_send())
        self.selector.close()
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def spawn(argv: list[str], **options: Any) -> tuple[SelectorConnection, subprocess.Popen[bytes]]:
    """A SelectorConnection to a child process over its stdin/stdout."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert proc.stdin is not None and proc.stdout is not None
    conn = SelectorConnection(os.dup(proc.stdout.fileno()), os.dup(proc.stdin.fileno()), **options)
    proc.stdin.close()
    proc.stdout.close()
    return conn, proc
