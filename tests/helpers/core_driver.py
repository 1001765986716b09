"""A deterministic step driver for the sans-I/O core (``acp.rpc.Scheduler``): no threads, no
pipes, no clock. It does what a runtime does, one visible step at a time, so a test can
interleave arrivals, drainer steps, answers, cancels, deadlines and close in any order (the way
h11's tests join two connections by a fake link).

``Side.receive(data)`` routes bytes and runs the hooks inline; what the scheduler says to do
now is recorded (``completed``, ``started``, ``cancelled``) and woken lanes get a drainer.
``Side.step(key)`` advances that lane's drainer by one item (or takes its next batch), so the
core only learns an item was handled when its drainer comes back for more, as with threads.
"""

from __future__ import annotations

import json
from typing import Any

from acp import rpc
from acp.rpc import scheduler as sched


def line(obj: dict[str, Any]) -> bytes:
    """One JSON-RPC line (``jsonrpc`` added)."""
    return json.dumps({"jsonrpc": "2.0", **obj}).encode() + b"\n"


def wire(data: bytes) -> list[dict[str, Any]]:
    """The messages of written bytes, each exactly one line."""
    assert data == b"" or data.endswith(b"\n")
    return [json.loads(chunk) for chunk in data.split(b"\n")[:-1]]


class Side:
    """One Scheduler, driven by hand."""

    def __init__(self, name: str = "core", ordering: rpc.Ordering = "connection", max_queued: int | None = None,
                 max_line_bytes: int = rpc.DEFAULT_MAX_LINE_BYTES) -> None:
        self.sched = rpc.Scheduler(name=name, ordering=ordering, max_queued=max_queued, max_line_bytes=max_line_bytes)
        self.out = bytearray()  # everything written, in order
        self.handled: list[Any] = []  # (method, params) of notifications, in the order handled
        self.started: list[rpc.Start] = []
        self.completed: list[rpc.Pending] = []
        self.cancelled: list[rpc.InboundRequest] = []
        self.hooks: list[Any] = []
        # Drainers: lane key -> the items taken and not yet handled (a list, maybe empty).
        self.drainers: dict[Any, list[Any]] = {}
        self.marks: list[Any] = []

    # ---------------------------------------------------------------- what a runtime does

    def receive(self, data: bytes) -> None:
        msgs = self.sched.decode_read(data)
        resume = 0
        while True:
            now = self.sched.route(msgs, resume)
            routed = self.sched.routed
            if routed is not None:
                if routed.flush:
                    self.flush()
                self.cancelled += routed.cancelled
            self._wake()
            self._act(now or [])
            hook = routed.hook if routed is not None else None
            if hook is None:
                return
            resume = routed.resume  # type: ignore[union-attr]
            self.hooks.append(hook)
            if type(hook) is rpc.Decoded:
                self.handled.append((hook.method, hook.params))
                hook.handler.fn(hook.params)
                continue
            try:
                hook[1].on_arrival(hook[3], hook[0])
                refused = None
            except Exception as exc:
                refused = exc
            if (routed.placed and refused is None) or self.sched.arrived(hook, refused):  # type: ignore[union-attr]
                self._act([hook])
            self.flush()

    def _act(self, now: list[Any]) -> None:
        for item in now:
            if type(item) is rpc.Pending:
                self.completed.append(item)
            else:
                self.started.append(item)

    def eof(self) -> list[rpc.Pending]:
        failed, _ = self.sched.receive_eof()
        self._wake()
        return failed

    def step(self, key: Any) -> bool:
        """One step of lane ``key``'s drainer; False once it stopped (the lane is idle)."""
        items = self.drainers[key]
        if not items:
            taken = self.sched.take(key)
            self._wake()
            if taken is None:
                del self.drainers[key]
                return False
            items.extend(taken)
            return True
        item = items.pop(0)
        if type(item) is rpc.Updates:
            for params in item:
                self.handled.append((item.method, params))
                item.handler.fn(params)
        elif type(item) is rpc.Decoded:
            self.handled.append((item.method, item.params))
            if item.fallback:
                item.handler.fn(item.method, item.params)
            else:
                item.handler.fn(item.params)
        elif type(item) is tuple:
            if self.sched.startable(item):
                self.started.append(item)
        elif type(item) in (rpc.Response, rpc.ErrorResponse):
            pending = self.sched.deliver(item)
            if pending is not None:
                self.completed.append(pending)
        else:
            self.marks.append(item)
            if item is sched.EOF:  # everything read before the end was handled
                self.completed.extend(self.sched.eof_reached())
        return True

    def drain(self, limit: int = 100_000) -> None:
        """Run every drainer until all lanes are idle."""
        for _ in range(limit):
            if not self.drainers:
                return
            self.step(next(iter(self.drainers)))
        raise AssertionError("the drainers never went idle")

    def flush(self) -> None:
        self.out += self.sched.data_to_send()

    def written(self) -> list[dict[str, Any]]:
        """Everything written so far (batched bytes flushed first)."""
        self.flush()
        return wire(bytes(self.out))

    def take_written(self) -> list[dict[str, Any]]:
        out = self.written()
        self.out.clear()
        return out

    # ---------------------------------------------------------------- calls

    def call(self, method: str, params: Any = None, result_type: Any = None, serial: bool = False,
             timeout: float | None = None, now: float = 0.0) -> rpc.Pending:
        pending, data = self.sched.send_request(method, params, result_type, None, serial, timeout, now)
        self.out += data
        return pending

    def answer(self, start: rpc.Start, result: Any) -> bool:
        data = self.sched.answer(start[0], result)
        if data is not None:
            self.out += data
        return data is not None

    def _wake(self) -> None:
        for key in self.sched.pop_woken():
            assert key not in self.drainers, f"two drainers for lane {key!r}"
            self.drainers[key] = []


def note(method: str, params: Any = None) -> bytes:
    return line({"method": method, "params": params} if params is not None else {"method": method})


def request(call_id: Any, method: str, params: Any = None) -> bytes:
    msg: dict[str, Any] = {"id": call_id, "method": method}
    if params is not None:
        msg["params"] = params
    return line(msg)


def result(call_id: Any, value: Any) -> bytes:
    return line({"id": call_id, "result": value})


def cancel(call_id: Any) -> bytes:
    return note(rpc.CANCEL_REQUEST, {"requestId": call_id})


GATE = sched.GATE
EOF = sched.EOF
DRAIN = sched.DRAIN
