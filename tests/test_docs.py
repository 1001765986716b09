"""Every code block of ``docs/*.md`` and ``README.md`` is run or checked, so the docs cannot rot.

How each fenced block is treated
================================

```python blocks
    Executed. A page's python blocks run in order, in ONE namespace, in a fresh subprocess
    (cwd = a temporary directory, timeout below). Tracebacks point at the Markdown file and
    line. After the last block no thread other than the main one may still be alive: the
    examples must close what they open.

    Each block is also complete by itself (it imports what it uses, builds the agent it talks to)
    and is run ALONE in a fresh interpreter too, unless its first line marks it, for the
    reader, as a continuation and names what it takes from the blocks above:

        ``# continued from above: uses client, session, tap.jsonl``

    The names are checked: the identifiers must be exactly the names the block uses without
    defining them (``symtable``), so a block cannot lean on an earlier one unmarked, nor carry
    a stale mark; a name with a dot is a file an earlier block made (and must appear in one). A block that leaves something running for the blocks below (a server) ends with a
    line ``# continued below: ...``; run alone, it is not asked to have stopped its threads.

    A directive in an HTML comment on the line right before the opening fence changes that:

    ``<!-- docs-test: agent-script -->``
        The block is a complete agent program that serves stdio until its input ends
        (``agent.serve_stdio()``). It is written to a file, spawned, and driven by a
        ``SyncClient`` (with LocalFiles / LocalTerminals / a permissive PermissionPolicy, cwd
        = the temporary directory): ``initialize``, ``session/new``, one ``session/prompt``
        ("hello"), which must end with a known stop reason; then the client closes and the
        agent must exit by itself.

    ``<!-- docs-test: file=NAME -->``
        The block is written to ``NAME`` in the page's temporary directory before anything
        runs, and is not run by itself: a LATER block of the same page must mention ``NAME``
        (and so run it, e.g. by spawning it), or the test fails. May be combined with
        ``agent-script`` (``<!-- docs-test: agent-script file=agent.py -->``).

        Every agent script is also checked with ``acp check``: it must be CONFORMING.

    ``<!-- docs-test: official-sdk-agent -->`` / ``<!-- docs-test: official-sdk-run -->``
        Code for the official Python SDK (PyPI ``agent-client-protocol``, also imported as
        ``acp``), shown on the comparison page. Always compiled. When that SDK's interpreter
        is available (``$ACP_OFFICIAL_PYTHON``, or ``benchmarks/.venv-official`` made by
        ``make bench-setup``) it is also run with it: ``official-sdk-agent`` as an agent
        script driven by OUR SyncClient (as above); ``official-sdk-run`` as a program in the
        page's temporary directory (``file=`` blocks available), which must exit 0. Without
        that interpreter those tests are reported as skipped, with the reason.

```sh blocks
    Not executed, but every command is checked: ``make T`` names a real Makefile target;
    ``pip install`` installs this project (``acp-sync``, ``'acp-sync[EXTRA]'`` for an extra of
    pyproject.toml, ``-e .``, ``'.[dev]'``, the wheel ``make dist`` builds);
    ``acp SUB ...`` / ``python -m acp SUB ...`` names a real CLI subcommand (``--help`` of it
    exits 0) and every ``--option`` used appears in that subcommand's help; ``python FILE`` runs
    a ``file=`` block of the same page. Any other command fails the test.

```text / ```json / ```console / ```nginx blocks
    Output samples, diagrams and configuration: not run (docs/deployment.md's nginx
    configuration is run by tests/test_deployment.py). ``json`` blocks must parse (one document, or one
    per line). A fence without a language, or with another language, fails the test.

Inline code
    Every inline ``acp.X.Y`` span in the docs must resolve (import + getattr), as must every
    ``Name.attr`` span whose ``Name`` is in ``acp.__all__``. ``docs/reference.md`` must mention
    every name of ``acp.__all__`` as ``acp.NAME``.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import json
import os
import re
import shlex
import subprocess
import symtable
import sys
import textwrap
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

import acp

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]
PAGE_TIMEOUT = 180  # seconds for all python blocks of one page
SCRIPT_TIMEOUT = 60

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")
_MODES = {"run", "agent-script", "official-sdk-agent", "official-sdk-run"}
_TEXT_LANGS = {"text", "json", "console", "nginx"}
_CONTINUES = re.compile(r"^# continued from above: uses (?P<names>[\w.-]+(?:, [\w.-]+)*)$")
_CONTINUED_BELOW = "# continued below"
_STOP_REASONS = {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the first code line
    lang: str
    code: str
    mode: str = "run"
    file: str | None = None
    options: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def parse_blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page`` with their directives."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group("fence"), m.group("info").strip().split(" ")[0]
        start = i + 1
        j = start
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        if j >= len(lines):
            raise AssertionError(f"{page.name}:{i + 1}: unclosed code fence")
        block = Block(page, start + 1, lang, textwrap.dedent("\n".join(lines[start:j])) + "\n")
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        d = _DIRECTIVE.match(lines[k]) if k >= 0 else None
        if d:
            for word in d.group("body").split():
                if "=" in word:
                    key, value = word.split("=", 1)
                    if key == "file":
                        block.file = value
                    else:
                        block.options[key] = value
                elif word in _MODES:
                    block.mode = word
                else:
                    raise AssertionError(f"{block.where}: unknown docs-test directive word {word!r}")
            if block.file is not None and block.mode == "run" and "run" not in d.group("body").split():
                block.mode = "file"
        blocks.append(block)
        i = j + 1
    return blocks


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _blocks(page: Path, *modes: str) -> list[Block]:
    return [b for b in parse_blocks(page) if b.lang == "python" and b.mode in modes]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONSTARTUP", None)
    return env


def _write_files(page: Path, tmp: Path) -> None:
    for block in parse_blocks(page):
        if block.file is not None:
            (tmp / block.file).write_text(block.code, encoding="utf-8")


def free_names(code: str) -> set[str]:
    """Names ``code`` uses without binding them (nor being builtins): what it needs from elsewhere."""
    top = symtable.symtable(code, "<block>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    used: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        for sym in table.get_symbols():
            if sym.is_referenced() and (table is top or sym.is_global()):
                used.add(sym.get_name())
        for child in table.get_children():
            walk(child)

    walk(top)
    return used - bound - set(dir(builtins))


def continued_from(block: Block) -> set[str] | None:
    """The names a block marked ``# continued from above: uses ...`` says it takes; None if unmarked."""
    m = _CONTINUES.match(block.code.splitlines()[0]) if block.code.strip() else None
    return set(m.group("names").split(", ")) if m else None


def continued_below(block: Block) -> bool:
    return block.code.rstrip().splitlines()[-1].startswith(_CONTINUED_BELOW)


_RUNNER = r'''
import json, linecache, os, sys, threading, time, traceback
blocks = json.load(open(sys.argv[1], encoding="utf-8"))
ns = {"__name__": "__docs__", "__builtins__": __builtins__}
for path, line, code in blocks:
    try:
        exec(compile("\n" * (line - 1) + code, path, "exec"), ns)
    except BaseException:
        traceback.print_exc()
        print(f"DOCS BLOCK FAILED: {path}:{line}", file=sys.stderr)
        sys.exit(1)
if sys.argv[2:] == ["continued-below"]:
    sys.stdout.flush()
    os._exit(0)  # what it started is for the blocks below; alone, it only had to run
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    left = [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()]
    if not left:
        break
    time.sleep(0.05)
else:
    print("DOCS THREADS LEFT RUNNING: " + ", ".join(t.name for t in left), file=sys.stderr)
    sys.exit(1)
'''


# ---------------------------------------------------------------------------------- python


@pytest.mark.timeout(PAGE_TIMEOUT + 30)
@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_python_blocks_run(page: Path, tmp_path: Path) -> None:
    blocks = _blocks(page, "run")
    if not blocks:
        return
    proc = _run_blocks(blocks, tmp_path)
    assert proc.returncode == 0, f"{_page_id(page)}: a block failed\n{proc.stdout}\n{proc.stderr}"


def _run_blocks(blocks: list[Block], tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    _write_files(blocks[0].page, tmp_path)
    spec = tmp_path / "_docs_blocks.json"
    spec.write_text(json.dumps([[str(b.page), b.line, b.code] for b in blocks]), encoding="utf-8")
    runner = tmp_path / "_docs_runner.py"
    runner.write_text(_RUNNER, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(runner), str(spec), *flags],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT,
    )


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_continuations_are_marked_with_what_they_use(page: Path) -> None:
    everything = parse_blocks(page)
    for block in _blocks(page, "run"):
        needs, says = free_names(block.code), continued_from(block)
        before = "".join(b.code for b in everything if b.line < block.line)
        if says is None:
            assert not needs, (
                f"{block.where}: uses {', '.join(sorted(needs))} from an earlier block: make it complete, "
                f"or start it with '# continued from above: uses {', '.join(sorted(needs))}'"
            )
        else:
            files = {name for name in says if "." in name}
            assert says - files == needs, f"{block.where}: the mark says it uses {sorted(says - files)}, it uses {sorted(needs)}"
            for name in files:
                assert name in before, f"{block.where}: the mark names {name}, which no block above makes"


def _complete_blocks() -> list[Block]:
    return [b for page in PAGES for b in _blocks(page, "run") if continued_from(b) is None]


@pytest.mark.timeout(SCRIPT_TIMEOUT + 30)
@pytest.mark.parametrize("block", _complete_blocks(), ids=lambda b: b.where)
def test_complete_blocks_run_alone(block: Block, tmp_path: Path) -> None:
    proc = _run_blocks([block], tmp_path, *(["continued-below"] if continued_below(block) else []))
    assert proc.returncode == 0, f"{block.where}: fails when run alone\n{proc.stdout}\n{proc.stderr}"


@cache
def _official_python() -> str | None:
    candidate = os.environ.get("ACP_OFFICIAL_PYTHON") or str(ROOT / "benchmarks" / ".venv-official" / "bin" / "python")
    if not Path(candidate).exists():
        return None
    probe = subprocess.run(
        [candidate, "-I", "-c", "import acp.core; print(acp.core.run_agent.__module__)"],
        cwd="/",
        capture_output=True, text=True,
    )
    return candidate if probe.returncode == 0 else None


def drive_agent(argv: list[str], cwd: Path) -> str:
    """Spawn an agent script and run one turn with our SyncClient; the stop reason."""
    updates: list[object] = []
    files = acp.LocalFiles([cwd])
    with acp.LocalTerminals() as terminals, (
        acp.SyncClient.builder()
        .agent_process(*argv, cwd=cwd)
        .session_update_handler(updates.append)
        .read_text_file_handler(files.read_text_file)
        .write_text_file_handler(files.write_text_file)
        .terminal_handlers(terminals)
        .request_permission_handler(acp.PermissionPolicy(default="allow"))
        .request_timeout(SCRIPT_TIMEOUT)
        .prompt_timeout(SCRIPT_TIMEOUT)
        .build()
    ) as client:
        client.initialize()
        session = client.new_session(cwd=str(cwd))
        stop = client.prompt(session.session_id, "hello").stop_reason
        process = client.process
    assert process is not None
    assert process.wait(10) is not None, "the agent did not exit after its input ended"
    return str(stop)


def _agent_script_blocks() -> list[Block]:
    return [b for page in PAGES for b in _blocks(page, "agent-script", "official-sdk-agent")]


@pytest.mark.timeout(SCRIPT_TIMEOUT * 2 + 30)
@pytest.mark.parametrize("block", _agent_script_blocks(), ids=lambda b: b.where)
def test_agent_scripts_serve_a_turn(block: Block, tmp_path: Path) -> None:
    compile(block.code, block.where, "exec")
    python = sys.executable
    if block.mode == "official-sdk-agent":
        official = _official_python()
        if official is None:
            pytest.skip("official SDK interpreter not available (make bench-setup, or $ACP_OFFICIAL_PYTHON)")
        python = official
    _write_files(block.page, tmp_path)
    script = tmp_path / (block.file or "_docs_agent.py")
    script.write_text(block.code, encoding="utf-8")
    stop = drive_agent([python, str(script)], tmp_path)
    assert stop in _STOP_REASONS, f"{block.where}: unexpected stop reason {stop!r}"


@pytest.mark.timeout(SCRIPT_TIMEOUT * 3)
@pytest.mark.parametrize("block", _agent_script_blocks(), ids=lambda b: b.where)
def test_documented_agents_pass_acp_check(block: Block, tmp_path: Path) -> None:
    """The first thing a newcomer does with a documented agent is check it: it must conform."""
    python = sys.executable
    if block.mode == "official-sdk-agent":
        official = _official_python()
        if official is None:
            pytest.skip("official SDK interpreter not available (make bench-setup, or $ACP_OFFICIAL_PYTHON)")
        python = official
    _write_files(block.page, tmp_path)
    script = tmp_path / (block.file or "_docs_agent.py")
    script.write_text(block.code, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "acp", "check", "--", python, str(script)],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=SCRIPT_TIMEOUT * 2,
    )
    assert proc.returncode == 0 and "verdict: CONFORMING" in proc.stdout, f"{block.where}:\n{proc.stdout}\n{proc.stderr}"


def _official_run_blocks() -> list[Block]:
    return [b for page in PAGES for b in _blocks(page, "official-sdk-run")]


@pytest.mark.timeout(SCRIPT_TIMEOUT + 30)
@pytest.mark.parametrize("block", _official_run_blocks(), ids=lambda b: b.where)
def test_official_sdk_programs_run(block: Block, tmp_path: Path) -> None:
    compile(block.code, block.where, "exec")
    official = _official_python()
    if official is None:
        pytest.skip("official SDK interpreter not available (make bench-setup, or $ACP_OFFICIAL_PYTHON)")
    _write_files(block.page, tmp_path)
    script = tmp_path / "_docs_official.py"
    script.write_text(block.code, encoding="utf-8")
    proc = subprocess.run(
        [official, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT
    )
    assert proc.returncode == 0, f"{block.where}:\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_block_has_a_way_to_run(page: Path) -> None:
    blocks = parse_blocks(page)
    for index, block in enumerate(blocks):
        if block.lang == "python":
            assert block.mode in _MODES | {"file"}, block.where
            if block.mode == "file":
                later = "".join(b.code for b in blocks[index + 1 :])
                assert block.file and block.file in later, (
                    f"{block.where}: file={block.file} is never used by a later block, so it never runs"
                )
        elif block.lang == "sh":
            assert block.mode == "run", f"{block.where}: sh blocks take no directive"
        elif block.lang in _TEXT_LANGS:
            assert block.mode == "run", f"{block.where}: {block.lang} blocks take no directive"
            if block.lang == "json":
                _check_json(block)
        else:
            raise AssertionError(
                f"{block.where}: code fence language {block.lang!r} is not python/sh/text/json/console/nginx"
            )


def _check_json(block: Block) -> None:
    try:
        json.loads(block.code)
    except ValueError:
        for line in block.code.splitlines():
            if line.strip():
                json.loads(line)


# ---------------------------------------------------------------------------------- sh


@cache
def _make_targets() -> frozenset[str]:
    targets: set[str] = set()
    for line in (ROOT / "Makefile").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+(?:\s+[A-Za-z0-9_.-]+)*)\s*:(?!=)", line)
        if m:
            targets.update(m.group(1).split())
    return frozenset(t for t in targets if not t.startswith(".") and not t.startswith("$"))


@cache
def _cli_help(sub: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "acp", sub, "--help"], capture_output=True, text=True, timeout=60, env=_env()
    )
    assert proc.returncode == 0, f"`acp {sub} --help` failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def _check_command(words: list[str], block: Block, files: set[str]) -> None:
    where = block.where
    if words[0] in ("make",):
        for target in words[1:]:
            if "=" in target or target.startswith("-"):
                continue
            assert target in _make_targets(), f"{where}: no Makefile target {target!r}"
        return
    if words[:2] == ["pip", "install"] or words[:4] == ["python", "-m", "pip", "install"]:
        rest = words[2:] if words[0] == "pip" else words[4:]
        allowed = {"acp-sync", "-e", ".", ".[dev]", "-q", "--upgrade", "-U", "dist/acp_sync-*.whl"}
        allowed |= {f"acp-sync[{extra}]" for extra in _extras()}
        assert rest and all(w in allowed for w in rest), f"{where}: pip install of something else: {rest}"
        return
    if words[0] == "acp" or words[:3] == ["python", "-m", "acp"]:
        args = words[1:] if words[0] == "acp" else words[3:]
        if not args or args[0] in ("--help", "-h"):
            _cli_help_top()
            return
        sub = args[0]
        help_text = _cli_help(sub)
        for arg in args[1:]:
            arg = arg.strip("[]")
            if arg == "--":
                break  # the agent's command follows
            if arg.startswith("-"):
                option = arg.split("=", 1)[0]
                assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text), (
                    f"{where}: `acp {sub}` has no option {option}"
                )
        return
    if words[0] == "python" and len(words) >= 2 and words[1].endswith(".py"):
        assert words[1] in files, f"{where}: {words[1]} is not a file= block of this page"
        return
    raise AssertionError(f"{where}: command {' '.join(words)!r} is not one the docs test knows")


@cache
def _extras() -> frozenset[str]:
    """The extras pyproject.toml declares (read as text: tomllib is 3.11+)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return frozenset(re.findall(r"^([a-z][a-z0-9-]*) = \[", section, re.M))


@cache
def _cli_help_top() -> str:
    proc = subprocess.run([sys.executable, "-m", "acp", "--help"], capture_output=True, text=True, timeout=60, env=_env())
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_sh_blocks_name_real_commands(page: Path) -> None:
    blocks = parse_blocks(page)
    files = {b.file for b in blocks if b.file}
    for block in blocks:
        if block.lang != "sh":
            continue
        for raw in block.code.splitlines():
            line = raw.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            for part in re.split(r"\s*(?:&&|;|\|)\s*", line):
                words = shlex.split(part)
                if words and words[0].startswith(".venv/bin/"):
                    words[0] = words[0].rsplit("/", 1)[1]
                if words and words[0] == "python3":
                    words[0] = "python"
                if words:
                    _check_command(words, block, files)


# ---------------------------------------------------------------------------------- names


_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def _inline_spans(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"^(`{3,}).*?^\1", "", text, flags=re.S | re.M)  # drop fenced blocks
    return _INLINE.findall(text)


def _has_member(cls: type, name: str) -> bool:
    """Whether instances of ``cls`` have ``name``: a class attribute, a dataclass field, an
    annotated attribute, or one ``__init__`` assigns (``self.name = ...``)."""
    if hasattr(cls, name):
        return True
    for klass in cls.__mro__:
        if name in getattr(klass, "__dataclass_fields__", {}) or name in vars(klass).get("__annotations__", {}):
            return True
        init = vars(klass).get("__init__")
        if init is not None:
            try:
                source = inspect.getsource(init)
            except (OSError, TypeError):
                continue
            if re.search(rf"\bself\.{re.escape(name)}\s*[:=]", source):
                return True
    return False


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        rest = parts[cut:]
        for index, attr in enumerate(rest):
            if isinstance(obj, type) and index == len(rest) - 1 and not hasattr(obj, attr):
                if _has_member(obj, attr):
                    return obj
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


_DOTTED = re.compile(r"^(acp(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(.*\))?$")
_MEMBER = re.compile(r"^([A-Z][A-Za-z]+)\.([a-z_][a-z0-9_]*)(?:\(.*\))?$")


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_inline_names_exist(page: Path) -> None:
    public = set(acp.__all__)
    problems = []
    for span in _inline_spans(page):
        span = span.strip()
        m = _DOTTED.match(span)
        if m:
            try:
                _resolve(m.group(1))
            except (ImportError, AttributeError) as exc:
                problems.append(f"{span}: {exc!r}")
            continue
        m = _MEMBER.match(span)
        if m and m.group(1) in public:
            if not _has_member(getattr(acp, m.group(1)), m.group(2)):
                problems.append(f"{span}: acp.{m.group(1)} has no attribute {m.group(2)!r}")
    assert not problems, f"{_page_id(page)}: names that do not exist:\n" + "\n".join(problems)


def test_reference_covers_every_public_name() -> None:
    spans = {s.strip() for s in _inline_spans(DOCS / "reference.md")}
    text = (DOCS / "reference.md").read_text(encoding="utf-8")
    missing = [n for n in acp.__all__ if f"acp.{n}" not in spans and f"`acp.{n}`" not in text]
    assert not missing, f"docs/reference.md does not document: {missing}"


def test_index_links_every_page() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for page in DOCS.glob("*.md"):
        if page.name != "index.md":
            assert f"({page.name})" in index, f"docs/index.md does not link {page.name}"
    for target in re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", index):
        assert (DOCS / target).exists(), f"docs/index.md links a missing page {target}"


def test_links_between_pages_resolve() -> None:
    for page in PAGES:
        for target in re.findall(r"\]\(([^):#]+\.md)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{_page_id(page)} links a missing page {target}"


_REFERENCED_CLASSES = (
    "SyncAgent", "SyncAgentBuilder", "AgentConnection", "AgentRequestContext", "PromptContext",
    "SyncClient", "SyncClientBuilder", "ClientRequestContext", "LocalFiles", "LocalTerminals",
    "PermissionPolicy", "NegotiatedCapabilities", "Connection", "InboundCall", "RequestError",
    "AsyncClient", "AsyncClientBuilder",
    "AsyncAgent", "AsyncAgentConnection", "AsyncAgentRequestContext", "AsyncPromptContext",
)


def test_reference_lists_every_public_member() -> None:
    """A method added to a main class must be added to docs/reference.md too."""
    text = (DOCS / "reference.md").read_text(encoding="utf-8")
    missing = []
    for name in _REFERENCED_CLASSES:
        cls = getattr(acp, name)
        members = {
            m for klass in cls.__mro__ if klass.__module__.startswith("acp")
            for m in vars(klass) if not m.startswith("_")
        }
        for member in sorted(members):
            owners = [k.__name__ for k in cls.__mro__ if k.__name__ in _REFERENCED_CLASSES]
            if not any(f"acp.{o}.{member}" in text for o in owners) and f"`{member}()" not in text:
                missing.append(f"{name}.{member}")
    assert not missing, f"docs/reference.md does not list: {missing}"


@pytest.mark.timeout(SCRIPT_TIMEOUT * 2 + 30)
def test_quickstart_files_run_on_their_own(tmp_path: Path) -> None:
    # Pasted into files as the page says (each block a file of its own, no shared namespace),
    # every program of the quickstart runs from the folder of my_agent.py.
    page = DOCS / "quickstart.md"
    _write_files(page, tmp_path)
    programs = [b.file for b in parse_blocks(page) if b.file and b.mode == "run"]
    assert programs == ["my_client.py", "in_process.py"]
    for name in programs:
        proc = subprocess.run([sys.executable, name], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                              timeout=SCRIPT_TIMEOUT)
        assert proc.returncode == 0, f"{name}:\n{proc.stdout}\n{proc.stderr}"
    assert "end_turn ['You said: hello']" in subprocess.run(
        [sys.executable, "my_client.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=SCRIPT_TIMEOUT
    ).stdout
