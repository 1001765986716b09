"""Choose the agent's transport from settings: a mapping, or the environment.

A program that drives "some agent" can leave the choice to whoever runs it::

    with acp.SyncClient.builder().agent_from_settings().build() as client:   # os.environ
        ...

The recognised keys (module constants of the same name):

``ACP_AGENT_COMMAND``
    Spawn the agent and talk over its stdin/stdout. A command line, split like a POSIX shell
    does (:func:`shlex.split`: quotes and backslashes, no variables, globs or pipes).
``ACP_AGENT_CWD``
    With the command only: the spawned agent's working directory (default: ours).
``ACP_AGENT_URL``
    Connect to a remote agent: a ``ws://``, ``wss://``, ``http://`` or ``https://`` URL.
``ACP_AGENT_HEADERS``
    With the URL only: extra request headers, either ``Name: value`` lines (one header per
    line, blank lines ignored) or a JSON object of strings (``{"X-Team": "core"}``, handy in a
    one-line ``.env`` file). A name given twice (in any case) is an error.
``ACP_AGENT_TOKEN``
    With the URL only: sent as ``Authorization: Bearer <token>``. Giving an ``Authorization``
    header in ``ACP_AGENT_HEADERS`` as well is an error.

Exactly one of ``ACP_AGENT_COMMAND`` / ``ACP_AGENT_URL`` must be set: none, or both, raises
:class:`AgentSettingsError` naming the keys. A value that is empty or only whitespace counts as
unset; the others are stripped of surrounding whitespace. A key of the other transport
(``ACP_AGENT_HEADERS`` with a command, ``ACP_AGENT_CWD`` with a URL) is an error rather than
silently ignored: it says the settings are not what their author thinks. Error messages name
the keys but never repeat a header value or the token.

:meth:`AgentSettings.from_mapping` only parses (nothing is spawned or opened, nothing touches
the file system); :meth:`acp.SyncClientBuilder.agent_from_settings` applies the result.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from ..transport.base import Transport

__all__ = [
    "ACP_AGENT_COMMAND",
    "ACP_AGENT_CWD",
    "ACP_AGENT_URL",
    "ACP_AGENT_HEADERS",
    "ACP_AGENT_TOKEN",
    "SETTINGS_KEYS",
    "URL_SCHEMES",
    "AgentSettings",
    "AgentSettingsError",
]

#: The agent's command line (spawned, stdio).
ACP_AGENT_COMMAND = "ACP_AGENT_COMMAND"
#: The spawned agent's working directory (with ``ACP_AGENT_COMMAND`` only).
ACP_AGENT_CWD = "ACP_AGENT_CWD"
#: A remote agent's URL.
ACP_AGENT_URL = "ACP_AGENT_URL"
#: Extra request headers (with ``ACP_AGENT_URL`` only).
ACP_AGENT_HEADERS = "ACP_AGENT_HEADERS"
#: A bearer token (with ``ACP_AGENT_URL`` only).
ACP_AGENT_TOKEN = "ACP_AGENT_TOKEN"
#: Every key :meth:`AgentSettings.from_mapping` reads.
SETTINGS_KEYS = (ACP_AGENT_COMMAND, ACP_AGENT_CWD, ACP_AGENT_URL, ACP_AGENT_HEADERS, ACP_AGENT_TOKEN)
#: The URL schemes accepted in ``ACP_AGENT_URL``.
URL_SCHEMES = ("ws", "wss", "http", "https")

_COMMAND_ONLY = (ACP_AGENT_CWD,)
_URL_ONLY = (ACP_AGENT_HEADERS, ACP_AGENT_TOKEN)
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (RFC 9110)
_BAD_VALUE_CHAR = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # controls except horizontal tab



class AgentSettingsError(ValueError):
    """Agent settings that do not describe exactly one usable transport.

    ``keys`` are the settings keys at fault (``("ACP_AGENT_COMMAND", "ACP_AGENT_URL")`` when
    both are set). The message names them and never repeats a header value or the token.
    """

    def __init__(self, message: str, keys: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.keys = keys


@dataclass(frozen=True, repr=False)
class AgentSettings:
    """Where the agent is: a command to spawn (``command``, ``cwd``) or a URL to open (``url``,
    ``headers``, the token already turned into ``Authorization``). Exactly one of ``command``
    and ``url`` is set. Make one with :meth:`from_mapping`; ``repr()`` hides header values.
    """

    command: tuple[str, ...] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError("AgentSettings: give exactly one of command and url")
        if self.command is not None and not (self.command and self.command[0]):
            raise ValueError("AgentSettings: the command is empty")
        if self.command is not None and self.headers:
            raise ValueError("AgentSettings: headers go with a url, not with a command")
        if self.url is not None and self.cwd is not None:
            raise ValueError("AgentSettings: cwd goes with a command, not with a url")

    # ------------------------------------------------------------------ parsing

    @classmethod
    def from_mapping(cls, settings: Mapping[str, str] | None = None) -> AgentSettings:
        """Parse the ``ACP_AGENT_*`` keys of ``settings`` (None: ``os.environ``); other keys
        are ignored. Raises :class:`AgentSettingsError` naming the keys at fault."""
        source = os.environ if settings is None else settings
        values: dict[str, str] = {}
        for key in SETTINGS_KEYS:
            raw = source.get(key)
            if raw is None:
                continue
            if not isinstance(raw, str):
                raise AgentSettingsError(f"{key} must be a string, not {type(raw).__name__}", (key,))
            if raw.strip():
                values[key] = raw
        command, url = values.get(ACP_AGENT_COMMAND), values.get(ACP_AGENT_URL)
        if command is not None and url is not None:
            raise AgentSettingsError(
                f"both {ACP_AGENT_COMMAND} and {ACP_AGENT_URL} are set: set exactly one "
                "(a command to spawn, or the URL of a remote agent)",
                (ACP_AGENT_COMMAND, ACP_AGENT_URL),
            )
        if command is None and url is None:
            hint = ""
            strays = sorted(
                k for k in source
                if isinstance(k, str) and k.startswith("ACP_AGENT_") and k not in SETTINGS_KEYS
            )
            if strays:
                hint = f" ({', '.join(strays)}: not a recognised key)"
            raise AgentSettingsError(
                f"no agent: set {ACP_AGENT_COMMAND} (a command to spawn) or {ACP_AGENT_URL} "
                f"(the URL of a remote agent){hint}",
                (ACP_AGENT_COMMAND, ACP_AGENT_URL),
            )
        problems: list[str] = []
        culprits: list[str] = []

        def fail(key: str, message: str) -> None:
            problems.append(f"{key}: {message}")
            culprits.append(key)

        if command is not None:
            for key in _URL_ONLY:
                if key in values:
                    fail(key, f"only applies to {ACP_AGENT_URL}, but {ACP_AGENT_COMMAND} is set")
            argv: tuple[str, ...] = ()
            try:
                argv = _parse_command(command)
            except ValueError as exc:
                fail(ACP_AGENT_COMMAND, str(exc))
            cwd = values.get(ACP_AGENT_CWD)
            _raise(problems, culprits)
            return cls(command=argv, cwd=cwd.strip() if cwd is not None else None)

        assert url is not None
        for key in _COMMAND_ONLY:
            if key in values:
                fail(key, f"only applies to {ACP_AGENT_COMMAND}, but {ACP_AGENT_URL} is set")
        try:
            url = _check_url(url)
        except ValueError as exc:
            fail(ACP_AGENT_URL, str(exc))
        headers: dict[str, str] = {}
        if ACP_AGENT_HEADERS in values:
            try:
                headers = _parse_headers(values[ACP_AGENT_HEADERS])
            except ValueError as exc:
                fail(ACP_AGENT_HEADERS, str(exc))
        if ACP_AGENT_TOKEN in values:
            token = values[ACP_AGENT_TOKEN].strip()
            if any(ch.isspace() or not ch.isprintable() for ch in token):
                fail(
                    ACP_AGENT_TOKEN,
                    "contains whitespace or control characters (give the token alone: "
                    "'Authorization: Bearer <token>' is sent)",
                )
            elif any(name.lower() == "authorization" for name in headers):
                problems.append(
                    f"{ACP_AGENT_TOKEN} and an Authorization header in {ACP_AGENT_HEADERS} are "
                    "both set: give one"
                )
                culprits.extend((ACP_AGENT_TOKEN, ACP_AGENT_HEADERS))
            else:
                headers["Authorization"] = f"Bearer {token}"
        _raise(problems, culprits)
        return cls(url=url, headers=headers)

    # ------------------------------------------------------------------ using

    @property
    def kind(self) -> Literal["process", "remote"]:
        """``"process"`` (spawn ``command``) or ``"remote"`` (open ``url``)."""
        return "process" if self.command is not None else "remote"

    def describe(self) -> str:
        """A one-line description for logs and messages (no header value, no password)."""
        if self.command is not None:
            import shlex

            where = f" (in {self.cwd})" if self.cwd is not None else ""
            return shlex.join(self.command) + where
        assert self.url is not None
        return _redact_url(self.url)

    def open_transport(self) -> Transport:
        """Spawn the agent or connect to it now, without a client (for a raw
        :class:`~acp.connection.Connection`, or ``acp check``)."""
        if self.command is not None:
            from ..transport.process import ProcessTransport

            return ProcessTransport(self.command, cwd=self.cwd)
        from ..transport.remote_spec import RemoteSpec

        assert self.url is not None
        return RemoteSpec(url=self.url, headers=dict(self.headers) or None).open()

    def __repr__(self) -> str:
        if self.command is not None:
            return f"AgentSettings(command={self.command!r}, cwd={self.cwd!r})"
        names = ", ".join(f"{name!r}: '***'" for name in self.headers)
        return f"AgentSettings(url={self.describe()!r}, headers={{{names}}})"


# ---------------------------------------------------------------------------------- parsers


def _parse_command(text: str) -> tuple[str, ...]:
    """Split a command line like a POSIX shell (``shlex``); ``ValueError`` when it is empty or
    its quotes are unbalanced."""
    import shlex

    try:
        argv = tuple(shlex.split(text, posix=True))
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise ValueError(f"cannot split the command line: {str(exc).lower()}") from None
    if not argv:
        raise ValueError("the command line is empty")
    if not argv[0]:
        raise ValueError("the program name is empty")
    return argv


def _check_url(text: str) -> str:
    """``text`` stripped, if it is a ``ws://``, ``wss://``, ``http://`` or ``https://`` URL with
    a host; else ``ValueError`` (which repeats the scheme, not the URL)."""
    url = text.strip()
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ValueError(f"not a valid URL ({exc})") from None
    allowed = ", ".join(f"{s}://" for s in URL_SCHEMES)
    if not parts.scheme:
        raise ValueError(f"not a URL: give {allowed} and a host")
    if parts.scheme.lower() not in URL_SCHEMES:
        raise ValueError(f"unsupported scheme {parts.scheme!r}: use {allowed}")
    if not hostname:
        raise ValueError("the URL has no host")
    return url


def _parse_headers(text: str) -> dict[str, str]:
    """Headers from ``Name: value`` lines, or from a JSON object of strings (when ``text``
    starts with ``{``). ``ValueError`` names the faulty line or name, never a value."""
    stripped = text.strip()
    pairs: list[tuple[str, object, str]] = []  # (name, value, where)
    if stripped.startswith("{"):
        import json

        try:
            obj = json.loads(stripped)
        except ValueError as exc:
            raise ValueError(f"not a valid JSON object (line {getattr(exc, 'lineno', '?')}, "
                             f"column {getattr(exc, 'colno', '?')})") from None
        if not isinstance(obj, dict):
            raise ValueError("a JSON value must be an object of strings")
        pairs = [(str(name), value, f"header {name!r}") for name, value in obj.items()]
    else:
        for number, line in enumerate(stripped.splitlines(), 1):
            if not line.strip():
                continue
            key, colon, text_value = line.partition(":")
            if not colon:
                raise ValueError(f"line {number} is not 'Name: value' (or give a JSON object)")
            pairs.append((key.strip(), text_value, f"line {number}"))
    headers: dict[str, str] = {}
    seen: set[str] = set()
    for name, value, where in pairs:
        if not _HEADER_NAME.match(name):
            at = f" ({where})" if where.startswith("line") else ""
            raise ValueError(f"{name!r} is not a valid header name{at}")
        if not isinstance(value, str):
            raise ValueError(f"{where}: the value must be a string, not {type(value).__name__}")
        if _BAD_VALUE_CHAR.search(value):
            raise ValueError(f"{where}: the value of {name} contains control characters")
        if name.lower() in seen:
            raise ValueError(f"{where}: {name} is given twice")
        seen.add(name.lower())
        headers[name] = value.strip()
    return headers


def _raise(problems: list[str], culprits: list[str]) -> None:
    if problems:
        keys = tuple(dict.fromkeys(culprits))
        raise AgentSettingsError("invalid agent settings: " + "; ".join(problems), keys)


def _redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return parts._replace(netloc=f"{user}:***@{netloc}").geturl()
