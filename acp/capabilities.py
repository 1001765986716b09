"""Capabilities: what each side advertises, derived from registered handlers, and what was
negotiated in ``initialize``.

A builder never asks the user to spell capabilities out: registering a ``session/load``
handler is what makes an agent advertise ``loadSession``, and registering the five terminal
handlers is what makes a client advertise ``terminal``. :class:`NegotiatedCapabilities` then
answers, for either side, "may I call this?" (``supports_…``) or refuses locally
(``require_…`` raises :class:`~acp.errors.CapabilityError` before anything is sent).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import msgspec

from . import schema
from .errors import CapabilityError

__all__ = [
    "NegotiatedCapabilities",
    "derive_agent_capabilities",
    "derive_client_capabilities",
    "TERMINAL_METHODS",
    "AGENT_METHOD_CAPABILITY",
    "CLIENT_METHOD_CAPABILITY",
    "UPDATE_CAPABILITY",
    "ARCHIVE_METHODS",
    "update_tag",
    "gated_update_tag",
]

ARCHIVE_METHODS = ("session/archive", "session/unarchive")

# Agent methods whose capability lives in the unstable schema.
_UNSTABLE_AGENT_METHODS = frozenset(
    {"session/fork", "session/status", "session/archive", "session/unarchive", "session/set_title"}
)

TERMINAL_METHODS = (
    "terminal/create",
    "terminal/output",
    "terminal/release",
    "terminal/wait_for_exit",
    "terminal/kill",
)

# Client -> agent methods that the agent must have advertised (the rest are always allowed).
AGENT_METHOD_CAPABILITY: dict[str, str] = {
    "session/load": "load_session",
    "session/list": "list_sessions",
    "session/delete": "delete_session",
    "session/resume": "resume_session",
    "session/close": "close_session",
    "session/fork": "fork_session",
    "logout": "logout",
    "providers/list": "providers",
    "providers/set": "providers",
    "providers/disable": "providers",
    "session/status": "session_status",
    "session/archive": "archive_session",
    "session/unarchive": "archive_session",
    "session/set_title": "set_session_title",
    "auth/status": "auth_status",
}

# Agent -> client session updates that the client must have advertised (by ``sessionUpdate``
# tag); every other kind is baseline ACP.
UPDATE_CAPABILITY: dict[str, str] = {
    "notice": "notices",
    "compaction_update": "compaction",
    "compaction_summary_chunk": "compaction",
    "subagent_update": "subagents",
    "session_message": "subagents",
    "session_message_chunk": "subagents",
}

# Agent -> client methods that the client must have advertised.
CLIENT_METHOD_CAPABILITY: dict[str, str] = {
    "fs/read_text_file": "read_text_file",
    "fs/write_text_file": "write_text_file",
    **{method: "terminal" for method in TERMINAL_METHODS},
    "elicitation/create": "elicitation",
    "elicitation/complete": "elicitation_url",
}


def derive_agent_capabilities(
    methods: Collection[str],
    prompt: schema.PromptCapabilities | None = None,
    mcp: schema.McpCapabilities | None = None,
    additional_directories: bool = False,
    system_prompt: bool = False,
    system_prompt_override: bool = False,
) -> schema.AgentCapabilities:
    """The ``agentCapabilities`` an agent with handlers for ``methods`` advertises.

    Unstable methods add their unstable capabilities (``session/status`` => ``status``, the
    two archive methods => ``archive``, ``session/set_title`` => ``title``, ``auth/status`` =>
    ``auth.status``). ``system_prompt``: the agent accepts client system prompts (unstable) in
    ``append`` mode, and also in ``override`` mode with ``system_prompt_override``.
    """
    session = schema.SessionCapabilities(
        list_=schema.SessionListCapabilities() if "session/list" in methods else None,
        delete=schema.SessionDeleteCapabilities() if "session/delete" in methods else None,
        resume=schema.SessionResumeCapabilities() if "session/resume" in methods else None,
        close=schema.SessionCloseCapabilities() if "session/close" in methods else None,
        additional_directories=(
            schema.SessionAdditionalDirectoriesCapabilities() if additional_directories else None
        ),
    )
    unstable_methods = any(m in _UNSTABLE_AGENT_METHODS for m in methods)
    if unstable_methods or system_prompt:
        from .schema import unstable

        if "session/fork" in methods:
            session.fork = unstable.SessionForkCapabilities()
        if "session/status" in methods:
            session.status = unstable.SessionStatusCapabilities()
        if all(m in methods for m in ARCHIVE_METHODS):
            session.archive = unstable.SessionArchiveCapabilities()
        if "session/set_title" in methods:
            session.title = unstable.SessionTitleCapabilities()
        if system_prompt:
            override = system_prompt_override
            session.system_prompt = unstable.SessionSystemPromptCapabilities(
                mode=unstable.SessionSystemPromptModeCapabilities(
                    override=unstable.SessionSystemPromptOverrideCapabilities()
                )
                if override
                else None
            )
    caps = schema.AgentCapabilities(
        load_session="session/load" in methods,
        prompt_capabilities=prompt if prompt is not None else schema.PromptCapabilities(),
        mcp_capabilities=mcp if mcp is not None else schema.McpCapabilities(),
        session_capabilities=session,
        auth=schema.AgentAuthCapabilities(
            logout=schema.LogoutCapabilities() if "logout" in methods else None
        ),
    )
    if "auth/status" in methods:
        from .schema import unstable

        caps.auth.status = unstable.AuthStatusCapabilities()
    if any(m.startswith("providers/") for m in methods):
        from .schema import unstable

        caps.providers = unstable.ProvidersCapabilities()
    return caps


def derive_client_capabilities(
    methods: Collection[str],
    elicitation_form: bool = True,
    elicitation_url: bool = True,
    *,
    notices: bool = False,
    compaction: bool = False,
    subagents: bool = False,
) -> schema.ClientCapabilities:
    """The ``clientCapabilities`` a client with handlers for ``methods`` advertises.

    Terminal support needs all five terminal handlers (the caller checks "all or none").
    Elicitation is advertised when an ``elicitation/create`` handler exists, in the modes given.
    ``notices`` / ``compaction`` (``session.notices`` / ``session.compaction``) and
    ``subagents`` (unstable) say the client shows those session updates (it registered a
    handler for them).
    """
    elicitation = None
    if "elicitation/create" in methods and (elicitation_form or elicitation_url):
        elicitation = schema.ElicitationCapabilities(
            form=schema.ElicitationFormCapabilities() if elicitation_form else None,
            url=schema.ElicitationUrlCapabilities() if elicitation_url else None,
        )
    session = None
    if notices or compaction:
        session = schema.ClientSessionCapabilities(
            notices=schema.NoticeCapabilities() if notices else None,
            compaction=schema.CompactionCapabilities() if compaction else None,
        )
    caps = schema.ClientCapabilities(
        fs=schema.FileSystemCapabilities(
            read_text_file="fs/read_text_file" in methods,
            write_text_file="fs/write_text_file" in methods,
        ),
        terminal=all(m in methods for m in TERMINAL_METHODS),
        session=session,
        elicitation=elicitation,
    )
    if subagents:
        from .schema import unstable

        caps.subagents = unstable.SubagentCapabilities()
    return caps


# One row per capability: its name (as in supports_<name>) and how to read it.
_AGENT_CHECKS: dict[str, Callable[[schema.AgentCapabilities], object]] = {
    "load_session": lambda a: a.load_session,
    "list_sessions": lambda a: a.session_capabilities.list_ is not None,
    "delete_session": lambda a: a.session_capabilities.delete is not None,
    "resume_session": lambda a: a.session_capabilities.resume is not None,
    "close_session": lambda a: a.session_capabilities.close is not None,
    "fork_session": lambda a: a.session_capabilities.fork is not None,
    "additional_directories": lambda a: a.session_capabilities.additional_directories is not None,
    "logout": lambda a: a.auth.logout is not None,
    "image_prompts": lambda a: a.prompt_capabilities.image,
    "audio_prompts": lambda a: a.prompt_capabilities.audio,
    "embedded_context_prompts": lambda a: a.prompt_capabilities.embedded_context,
    "mcp_http": lambda a: a.mcp_capabilities.http,
    "mcp_sse": lambda a: a.mcp_capabilities.sse,
    "providers": lambda a: a.providers is not None,
    "session_status": lambda a: a.session_capabilities.status is not None,
    "archive_session": lambda a: a.session_capabilities.archive is not None,
    "set_session_title": lambda a: a.session_capabilities.title is not None,
    "auth_status": lambda a: a.auth.status is not None,
    "system_prompt": lambda a: a.session_capabilities.system_prompt is not None,
    "system_prompt_override": lambda a: (
        a.session_capabilities.system_prompt is not None
        and a.session_capabilities.system_prompt.mode is not None
        and a.session_capabilities.system_prompt.mode.override is not None
    ),
}
_CLIENT_CHECKS: dict[str, Callable[[schema.ClientCapabilities], object]] = {
    "read_text_file": lambda c: c.fs.read_text_file,
    "write_text_file": lambda c: c.fs.write_text_file,
    "terminal": lambda c: c.terminal,
    "elicitation": lambda c: c.elicitation is not None and (c.elicitation.form or c.elicitation.url),
    "elicitation_form": lambda c: c.elicitation is not None and c.elicitation.form is not None,
    "elicitation_url": lambda c: c.elicitation is not None and c.elicitation.url is not None,
    "terminal_auth": lambda c: c.auth.terminal,
    "boolean_config_options": lambda c: (
        c.session is not None
        and c.session.config_options is not None
        and c.session.config_options.boolean is not None
    ),
    "notices": lambda c: c.session is not None and c.session.notices is not None,
    "compaction": lambda c: c.session is not None and c.session.compaction is not None,
    "subagents": lambda c: c.subagents is not None,
}


def _baseline_update_types() -> frozenset[type]:
    # The generated SessionUpdate variants whose kind needs no capability (chunks, tool calls,
    # plans...): one set lookup decides the common case on the streaming hot path.
    from typing import get_args

    return frozenset(
        cls for cls in get_args(schema.SessionUpdate)
        if getattr(getattr(cls, "__struct_config__", None), "tag", None) not in UPDATE_CAPABILITY
        and not issubclass(cls, dict)
    )


_BASELINE_UPDATE_TYPES = _baseline_update_types()


def gated_update_tag(update: object) -> str | None:
    """The ``sessionUpdate`` tag of ``update`` when sending it needs a client capability
    (:data:`UPDATE_CAPABILITY`), else None."""
    if type(update) in _BASELINE_UPDATE_TYPES:
        return None
    tag = update_tag(update)  # a gated kind, a value with extra fields, a raw dict
    return tag if tag in UPDATE_CAPABILITY else None


def update_tag(update: object) -> str | None:
    """The ``sessionUpdate`` tag of a typed update (or of a raw dict)."""
    if isinstance(update, dict):
        tag = update.get("sessionUpdate")
        return tag if isinstance(tag, str) else None
    config = getattr(type(update), "__struct_config__", None)
    tag = getattr(config, "tag", None)
    return tag if isinstance(tag, str) else None


class NegotiatedCapabilities(msgspec.Struct, frozen=True):
    """What both sides declared in ``initialize``: the agent's and the client's capabilities,
    the protocol version in force, and the peers' names.

    Every capability has ``supports_<name>()`` (a bool) and ``require_<name>()`` (raises
    :class:`CapabilityError`); :meth:`supports` / :meth:`require` take the name as a string.
    """

    protocol_version: int
    agent: schema.AgentCapabilities = msgspec.field(default_factory=schema.AgentCapabilities)
    client: schema.ClientCapabilities = msgspec.field(default_factory=schema.ClientCapabilities)
    auth_methods: tuple[schema.AuthMethod, ...] = ()
    agent_info: schema.Implementation | None = None
    client_info: schema.Implementation | None = None

    @classmethod
    def from_initialize(
        cls, request: schema.InitializeRequest, response: schema.InitializeResponse
    ) -> NegotiatedCapabilities:
        """Both halves of an ``initialize`` exchange."""
        return cls(
            protocol_version=response.protocol_version,
            agent=response.agent_capabilities,
            client=request.client_capabilities,
            auth_methods=tuple(response.auth_methods),
            agent_info=response.agent_info,
            client_info=request.client_info,
        )

    @staticmethod
    def names() -> tuple[str, ...]:
        """Every capability name :meth:`supports` knows."""
        return (*_AGENT_CHECKS, *_CLIENT_CHECKS)

    def supports(self, name: str) -> bool:
        """Whether capability ``name`` (see :meth:`names`) was advertised."""
        if name in _AGENT_CHECKS:
            return bool(_AGENT_CHECKS[name](self.agent))
        if name in _CLIENT_CHECKS:
            return bool(_CLIENT_CHECKS[name](self.client))
        raise ValueError(f"unknown capability {name!r}")

    def require(self, name: str, what: str | None = None) -> None:
        """Raise :class:`CapabilityError` unless capability ``name`` was advertised."""
        if not self.supports(name):
            side = "agent" if name in _AGENT_CHECKS else "client"
            raise CapabilityError(
                f"{what or name}: the {side} did not advertise the {name!r} capability"
            )

    def allows_agent_method(self, method: str) -> bool:
        """Whether the client may send ``method`` to this agent."""
        name = AGENT_METHOD_CAPABILITY.get(method)
        return name is None or self.supports(name)

    def allows_client_method(self, method: str) -> bool:
        """Whether the agent may send ``method`` to this client."""
        name = CLIENT_METHOD_CAPABILITY.get(method)
        return name is None or self.supports(name)

    def require_agent_method(self, method: str) -> None:
        """Raise :class:`CapabilityError` unless the agent advertised ``method``."""
        name = AGENT_METHOD_CAPABILITY.get(method)
        if name is not None:
            check = _AGENT_CHECKS.get(name)  # supports(), inlined: once per client call
            if check is None or not check(self.agent):
                self.require(name, method)

    def require_client_method(self, method: str) -> None:
        """Raise :class:`CapabilityError` unless the client advertised ``method``."""
        name = CLIENT_METHOD_CAPABILITY.get(method)
        if name is not None:
            check = _CLIENT_CHECKS.get(name)  # supports(), inlined: once per agent -> client call
            if check is None or not check(self.client):
                self.require(name, method)

    def allows_update(self, update: object) -> bool:
        """Whether the agent may send this session update to the client."""
        tag = gated_update_tag(update)
        return tag is None or self.supports(UPDATE_CAPABILITY[tag])

    def require_update(self, update: object) -> None:
        """Raise :class:`CapabilityError` unless the client advertised what ``update`` needs
        (``notice`` => ``session.notices``, compaction updates => ``session.compaction``,
        subagent and session messages => ``subagents``)."""
        tag = gated_update_tag(update)
        if tag is not None:
            self.require(UPDATE_CAPABILITY[tag], f"session/update {tag!r}")

    # Named forms, one pair per capability (the tables above are the source of truth).
    def supports_load_session(self) -> bool:
        """The agent handles ``session/load``."""
        return self.supports("load_session")

    def require_load_session(self) -> None:
        """Raise unless the agent handles ``session/load``."""
        self.require("load_session")

    def supports_list_sessions(self) -> bool:
        """The agent handles ``session/list``."""
        return self.supports("list_sessions")

    def require_list_sessions(self) -> None:
        """Raise unless the agent handles ``session/list``."""
        self.require("list_sessions")

    def supports_delete_session(self) -> bool:
        """The agent handles ``session/delete``."""
        return self.supports("delete_session")

    def require_delete_session(self) -> None:
        """Raise unless the agent handles ``session/delete``."""
        self.require("delete_session")

    def supports_resume_session(self) -> bool:
        """The agent handles ``session/resume``."""
        return self.supports("resume_session")

    def require_resume_session(self) -> None:
        """Raise unless the agent handles ``session/resume``."""
        self.require("resume_session")

    def supports_close_session(self) -> bool:
        """The agent handles ``session/close``."""
        return self.supports("close_session")

    def require_close_session(self) -> None:
        """Raise unless the agent handles ``session/close``."""
        self.require("close_session")

    def supports_fork_session(self) -> bool:
        """The agent handles ``session/fork`` (unstable)."""
        return self.supports("fork_session")

    def require_fork_session(self) -> None:
        """Raise unless the agent handles ``session/fork`` (unstable)."""
        self.require("fork_session")

    def supports_additional_directories(self) -> bool:
        """The agent accepts ``additionalDirectories`` on sessions."""
        return self.supports("additional_directories")

    def require_additional_directories(self) -> None:
        """Raise unless the agent accepts ``additionalDirectories``."""
        self.require("additional_directories")

    def supports_logout(self) -> bool:
        """The agent handles ``logout``."""
        return self.supports("logout")

    def require_logout(self) -> None:
        """Raise unless the agent handles ``logout``."""
        self.require("logout")

    def supports_image_prompts(self) -> bool:
        """The agent accepts image content in prompts."""
        return self.supports("image_prompts")

    def require_image_prompts(self) -> None:
        """Raise unless the agent accepts image content in prompts."""
        self.require("image_prompts")

    def supports_audio_prompts(self) -> bool:
        """The agent accepts audio content in prompts."""
        return self.supports("audio_prompts")

    def require_audio_prompts(self) -> None:
        """Raise unless the agent accepts audio content in prompts."""
        self.require("audio_prompts")

    def supports_embedded_context_prompts(self) -> bool:
        """The agent accepts embedded resources in prompts."""
        return self.supports("embedded_context_prompts")

    def require_embedded_context_prompts(self) -> None:
        """Raise unless the agent accepts embedded resources in prompts."""
        self.require("embedded_context_prompts")

    def supports_mcp_http(self) -> bool:
        """The agent connects to MCP servers over HTTP."""
        return self.supports("mcp_http")

    def require_mcp_http(self) -> None:
        """Raise unless the agent connects to MCP servers over HTTP."""
        self.require("mcp_http")

    def supports_mcp_sse(self) -> bool:
        """The agent connects to MCP servers over SSE."""
        return self.supports("mcp_sse")

    def require_mcp_sse(self) -> None:
        """Raise unless the agent connects to MCP servers over SSE."""
        self.require("mcp_sse")

    def supports_providers(self) -> bool:
        """The agent handles ``providers/*`` (unstable)."""
        return self.supports("providers")

    def require_providers(self) -> None:
        """Raise unless the agent handles ``providers/*`` (unstable)."""
        self.require("providers")

    def supports_session_status(self) -> bool:
        """The agent handles ``session/status`` (unstable)."""
        return self.supports("session_status")

    def require_session_status(self) -> None:
        """Raise unless the agent handles ``session/status`` (unstable)."""
        self.require("session_status")

    def supports_archive_session(self) -> bool:
        """The agent handles ``session/archive`` and ``session/unarchive`` (unstable)."""
        return self.supports("archive_session")

    def require_archive_session(self) -> None:
        """Raise unless the agent handles ``session/archive`` / ``session/unarchive`` (unstable)."""
        self.require("archive_session")

    def supports_set_session_title(self) -> bool:
        """The agent handles ``session/set_title`` (unstable)."""
        return self.supports("set_session_title")

    def require_set_session_title(self) -> None:
        """Raise unless the agent handles ``session/set_title`` (unstable)."""
        self.require("set_session_title")

    def supports_auth_status(self) -> bool:
        """The agent handles ``auth/status`` and may send ``auth/status_update`` (unstable)."""
        return self.supports("auth_status")

    def require_auth_status(self) -> None:
        """Raise unless the agent handles ``auth/status`` (unstable)."""
        self.require("auth_status")

    def supports_system_prompt(self) -> bool:
        """The agent accepts a client ``systemPrompt`` in ``append`` mode (unstable)."""
        return self.supports("system_prompt")

    def require_system_prompt(self) -> None:
        """Raise unless the agent accepts a client ``systemPrompt`` (unstable)."""
        self.require("system_prompt")

    def supports_system_prompt_override(self) -> bool:
        """The agent also accepts a ``systemPrompt`` in ``override`` mode (unstable)."""
        return self.supports("system_prompt_override")

    def require_system_prompt_override(self) -> None:
        """Raise unless the agent accepts a ``systemPrompt`` in ``override`` mode (unstable)."""
        self.require("system_prompt_override")

    def supports_read_text_file(self) -> bool:
        """The client handles ``fs/read_text_file``."""
        return self.supports("read_text_file")

    def require_read_text_file(self) -> None:
        """Raise unless the client handles ``fs/read_text_file``."""
        self.require("read_text_file")

    def supports_write_text_file(self) -> bool:
        """The client handles ``fs/write_text_file``."""
        return self.supports("write_text_file")

    def require_write_text_file(self) -> None:
        """Raise unless the client handles ``fs/write_text_file``."""
        self.require("write_text_file")

    def supports_terminal(self) -> bool:
        """The client handles the ``terminal/*`` methods."""
        return self.supports("terminal")

    def require_terminal(self) -> None:
        """Raise unless the client handles the ``terminal/*`` methods."""
        self.require("terminal")

    def supports_elicitation(self) -> bool:
        """The client handles ``elicitation/create`` (in some mode)."""
        return self.supports("elicitation")

    def require_elicitation(self) -> None:
        """Raise unless the client handles ``elicitation/create``."""
        self.require("elicitation")

    def supports_elicitation_form(self) -> bool:
        """The client handles form-mode elicitation."""
        return self.supports("elicitation_form")

    def require_elicitation_form(self) -> None:
        """Raise unless the client handles form-mode elicitation."""
        self.require("elicitation_form")

    def supports_elicitation_url(self) -> bool:
        """The client handles URL-mode elicitation."""
        return self.supports("elicitation_url")

    def require_elicitation_url(self) -> None:
        """Raise unless the client handles URL-mode elicitation."""
        self.require("elicitation_url")

    def supports_terminal_auth(self) -> bool:
        """The client can run terminal authentication methods."""
        return self.supports("terminal_auth")

    def require_terminal_auth(self) -> None:
        """Raise unless the client can run terminal authentication methods."""
        self.require("terminal_auth")

    def supports_boolean_config_options(self) -> bool:
        """The client renders boolean session config options."""
        return self.supports("boolean_config_options")

    def require_boolean_config_options(self) -> None:
        """Raise unless the client renders boolean session config options."""
        self.require("boolean_config_options")

    def supports_notices(self) -> bool:
        """The client shows ``notice`` session updates (``session.notices``)."""
        return self.supports("notices")

    def require_notices(self) -> None:
        """Raise unless the client shows ``notice`` session updates."""
        self.require("notices")

    def supports_compaction(self) -> bool:
        """The client shows context compaction updates (``session.compaction``)."""
        return self.supports("compaction")

    def require_compaction(self) -> None:
        """Raise unless the client shows context compaction updates."""
        self.require("compaction")

    def supports_subagents(self) -> bool:
        """The client shows subagent sessions (``subagents``, unstable)."""
        return self.supports("subagents")

    def require_subagents(self) -> None:
        """Raise unless the client shows subagent sessions (unstable)."""
        self.require("subagents")
