"""``acp trace --validate``: every message of a recording checked against the official ACP JSON
Schema of the protocol version the recording negotiated.

The schema is not shipped with the package (it is the upstream project's file): give its folder
with ``--schema DIR`` or ``$ACP_SCHEMA_DIR`` (a folder holding ``v1/schema.json``, e.g.
``node_modules/@agentclientprotocol/sdk/schema`` after ``npm install @agentclientprotocol/sdk``).
Validation needs ``jsonschema``: ``pip install 'acp-sync[validate]'``.

Each message is checked as the schema's own types say: a request's or notification's
``params`` against the type with that ``x-method`` (methods only the unstable schema has are
checked against ``schema.unstable.json``), an answer's ``result`` against its request's response
type, an error against ``Error``. ``_``-prefixed extension methods are not checked; a method
neither schema knows is reported.
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass
from typing import IO, Any

from .recording import Message, Recording, load_recording

__all__ = ["Violation", "SchemaUnavailable", "validate_recording", "run_validate", "SCHEMA_ENV"]

SCHEMA_ENV = "ACP_SCHEMA_DIR"


class SchemaUnavailable(Exception):
    """The schema (or ``jsonschema``) cannot be had; the message says how to get it."""


@dataclass
class Violation:
    """One message that does not fit the schema."""

    line: int
    message: Message
    error: str

    def __str__(self) -> str:
        what = self.message.method or "?"
        kind = "answer to " if self.message.kind in ("result", "error") else ""
        return f"line {self.line}: {kind}{what} from the {self.message.sender}: {self.error}"


class _Schemas:
    """The validators of one protocol version, by (type name)."""

    def __init__(self, folder: str, version: int) -> None:
        try:
            jsonschema: Any = importlib.import_module("jsonschema")
        except ImportError:
            raise SchemaUnavailable(
                "acp trace --validate needs jsonschema: pip install 'acp-sync[validate]'"
            ) from None
        self._jsonschema = jsonschema
        self._docs: list[dict[str, Any]] = []
        for name in ("schema.json", "schema.unstable.json"):
            path = os.path.join(folder, f"v{version}", name)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as file:
                    self._docs.append(json.load(file))
        if not self._docs:
            raise SchemaUnavailable(f"{folder} has no v{version}/schema.json (protocol version {version})")
        self._validators: dict[tuple[int, str], Any] = {}
        # x-method -> (request/notification type, response type) in each document
        self._methods: list[dict[str, dict[str, str]]] = []
        for doc in self._docs:
            methods: dict[str, dict[str, str]] = {}
            for type_name, node in doc.get("$defs", {}).items():
                method = node.get("x-method")
                if isinstance(method, str):
                    role = "answer" if type_name.endswith("Response") else "call"
                    methods.setdefault(method, {})[role] = type_name
            self._methods.append(methods)

    def check(self, message: Message) -> str | None:
        """Why ``message`` does not fit (None: it fits, or it is not checked)."""
        msg = message.msg
        if not isinstance(msg, dict):
            return "not a JSON-RPC message"
        if msg.get("jsonrpc") != "2.0":
            return f"jsonrpc is {msg.get('jsonrpc')!r}, not \"2.0\""
        method = message.method or ""
        if method.startswith("_"):
            return None
        if message.kind == "error":
            return self._check_type(0, "Error", msg.get("error"))
        role = "call" if message.kind in ("request", "notification") else "answer"
        if role == "answer" and message.pair is None:
            return None  # an answer to no recorded request: nothing to check it against
        for number, methods in enumerate(self._methods):
            type_name = methods.get(method, {}).get(role)
            if type_name is not None:
                value = msg.get("params") if role == "call" else msg.get("result")
                return self._check_type(number, type_name, value)
        return f"unknown method {method!r}"

    def _check_type(self, number: int, type_name: str, value: Any) -> str | None:
        validator = self._validators.get((number, type_name))
        if validator is None:
            doc = self._docs[number]
            schema = {"$defs": doc["$defs"], "$ref": f"#/$defs/{type_name}"}
            cls = self._jsonschema.validators.validator_for(doc)
            validator = self._validators[(number, type_name)] = cls(schema)
        error = self._jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is None:
            return None
        error = self._meant(error)
        where = "/".join(str(p) for p in error.absolute_path)
        return f"{type_name}{' at ' + where if where else ''}: {error.message}"


    def _meant(self, error: Any) -> Any:
        """For a value that fits no variant of a union, the error of the variant it meant: the
        one whose tag (a ``const`` or ``enum`` member) it matched."""
        while error.context:
            branches: dict[Any, list[Any]] = {}
            for sub in error.context:
                branches.setdefault(sub.relative_schema_path[0], []).append(sub)
            meant = [errors for errors in branches.values()
                     if not any(e.validator in ("const", "enum") for e in errors)]
            if not meant:
                break
            error = self._jsonschema.exceptions.best_match(min(meant, key=len))
        return error


def find_schema_dir(explicit: str | None) -> str:
    """The schema folder: ``explicit``, else ``$ACP_SCHEMA_DIR``; raises SchemaUnavailable."""
    folder = explicit or os.environ.get(SCHEMA_ENV)
    if not folder:
        raise SchemaUnavailable(
            "acp trace --validate needs the official ACP JSON Schema: pass --schema DIR or set "
            f"{SCHEMA_ENV} to a folder holding v1/schema.json (npm install @agentclientprotocol/sdk "
            "ships one in node_modules/@agentclientprotocol/sdk/schema)"
        )
    if not os.path.isdir(folder):
        raise SchemaUnavailable(f"no such schema folder: {folder}")
    return folder


def validate_recording(recording: Recording, schema_dir: str) -> list[Violation]:
    """Every violation in ``recording``, in file order."""
    version = recording.protocol_version or 1
    schemas = _Schemas(schema_dir, version)
    violations = []
    for message in recording.messages:
        if message.kind == "invalid" and message.msg is None:
            violations.append(Violation(message.line, message, "not JSON"))
            continue
        error = schemas.check(message)
        if error is not None:
            violations.append(Violation(message.line, message, error))
    return violations


def run_validate(path: str, *, schema_dir: str | None, out: IO[str]) -> int:
    """``acp trace --validate``: print each violation; 1 when there is any (or the check cannot
    run), else 0."""
    try:
        recording = load_recording(path)
        violations = validate_recording(recording, find_schema_dir(schema_dir))
    except OSError as exc:
        out.write(f"acp trace: cannot read {path}: {exc.strerror or exc}\n")
        return 1
    except SchemaUnavailable as exc:
        out.write(f"acp trace: {exc}\n")
        return 1
    from ._text import safe

    for violation in violations:
        out.write(safe(str(violation)) + "\n")
    for problem in recording.problems:
        out.write(safe(f"{problem}") + "\n")
    version = recording.protocol_version
    checked = sum(1 for m in recording.messages if m.kind != "invalid")
    out.write(
        f"{checked} messages checked against protocol version {version or 1}"
        f"{'' if version else ' (no initialize answer: assumed)'}: {len(violations)} violation{'' if len(violations) == 1 else 's'}\n"
    )
    out.flush()
    return 1 if violations or recording.problems else 0
