"""`acp trace`: a recording read back, in the terminal and as an HTML page in a real browser."""

from __future__ import annotations

import html.parser
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from acp.trace import analyse, load_trace
from acp.trace_html import render_html

ROOT = Path(__file__).resolve().parent.parent
WAIT = 60.0
SCENARIO = [sys.executable, "-m", "acp.examples.scenario_agent"]


def acp_cli(*args: str, stdin: str = "", cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acp", *args], input=stdin, capture_output=True,
                          text=True, timeout=WAIT, cwd=cwd)


@pytest.fixture(scope="module")
def chat_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real recording: acp chat with the scenario agent, two sessions, an error, a permission."""
    folder = tmp_path_factory.mktemp("trace")
    record = folder / "chat.jsonl"
    script = "stream 3\npermission\n1\nerror -32001\n/new\necho </script><b>not markup</b>\n/quit\n"
    done = acp_cli("chat", "--record", str(record), "--cwd", str(folder), "--", *SCENARIO, stdin=script, cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    return record


def test_trace_pairs_requests_with_answers_and_shows_errors(chat_recording: Path) -> None:
    done = acp_cli("trace", str(chat_recording))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "session s1: scenario-1" and lines[1] == "session s2: scenario-2"
    prompt = next(line for line in lines if "request" in line and '"stream 3"' in line)
    number = prompt.split("#")[1].split()[0]
    answer = next(line for line in lines if f"#{number}↩" in line)
    assert "session/prompt" in answer and "stopReason end_turn" in answer and answer.endswith(" ms")
    assert "C→A" in prompt and "A→C" in answer and "[s1]" in prompt
    error = next(line for line in lines if "Scenario error -32001" in line)
    assert 'data={"scenario": "error"}' in error  # the agent's data, in the line
    permission = next(line for line in lines if "session/request_permission" in line and "request" in line)
    assert permission.split()[1] == "A→C"  # the agent asked the client
    assert any('agent_message_chunk "chunk 2/3"' in line for line in lines)
    assert lines[-1].endswith("(0 unanswered), 1 errors, 2 sessions, 4 turns")
    coloured = acp_cli("trace", "--color", "always", str(chat_recording)).stdout
    assert any(line.startswith("\x1b[31;1m") and "-32001" in line for line in coloured.splitlines())
    assert "\x1b[" not in done.stdout  # not a terminal: no colour by default


def test_turns_are_reassembled(chat_recording: Path) -> None:
    trace = load_trace(chat_recording)
    first = trace.turns[0]
    assert (first.prompt, first.reply, first.stop_reason) == ("stream 3", "chunk 1/3\nchunk 2/3\nchunk 3/3\n", "end_turn")
    assert first.duration is not None and first.session == "scenario-1"
    assert trace.turns[1].tool_calls == ["Apply the edit to hello.py (edit)"]
    assert trace.turns[2].stop_reason is None and "-32001" in (trace.turns[2].error or "")
    assert trace.turns[3].session == "scenario-2" and trace.turns[3].reply == "</script><b>not markup</b>"


def test_an_agent_side_recording_reads_the_same(chat_recording: Path) -> None:
    # The same conversation recorded on the agent's side: every direction swapped.
    swapped = []
    for line in chat_recording.read_text().splitlines():
        entry = json.loads(line)
        entry["dir"] = "in" if entry["dir"] == "out" else "out"
        swapped.append(json.dumps(entry))
    ours, theirs = load_trace(chat_recording), analyse(swapped)
    assert [m.sender for m in ours.messages] == [m.sender for m in theirs.messages]
    assert ours.messages[0].sender == "client" and len(theirs.turns) == len(ours.turns)


def test_unanswered_requests_bad_lines_and_a_missing_file(tmp_path: Path) -> None:
    trace = analyse([
        '{"t":0,"dir":"out","msg":{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}}',
        '{"t":0.5,"dir":"in","raw":"Traceback (most recent call last):"}',
        "not a recording line",
        '{"t":1,"dir":"out","msg":{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/"}}}',
        '{"t":1.2,"dir":"in","msg":{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}}',
    ])
    assert [m.kind for m in trace.messages] == ["request", "invalid", "request", "result"]
    assert trace.messages[0].pair == 3 and trace.messages[3].latency == pytest.approx(1.2)
    assert [m.method for m in trace.unanswered] == ["session/new"]
    assert trace.problems == ["line 3: not a recording entry: not a recording line"]
    missing = acp_cli("trace", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 1 and "cannot read" in missing.stdout
    (tmp_path / "one.jsonl").write_text('{"t":0,"dir":"out","raw":"x"}\n')
    unwritable = acp_cli("trace", str(tmp_path / "one.jsonl"), "--html", str(tmp_path / "no" / "page.html"))
    assert unwritable.returncode == 1 and "cannot write" in unwritable.stdout


# ---------------------------------------------------------------------------------- the page


def find_browser() -> str | None:
    chosen = os.environ.get("ACP_TEST_BROWSER")
    if chosen:
        return chosen
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture
def browser() -> str:
    found = find_browser()
    if found is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("no headless browser (chromium) installed; CI must run the acp trace --html test")
        pytest.skip("no chromium on PATH (apt-get install chromium, or set ACP_TEST_BROWSER) to load the trace page")
    return found


class _Dom(html.parser.HTMLParser):
    """What the test needs from the page as the browser left it."""

    def __init__(self) -> None:
        super().__init__()
        self.body: dict[str, str | None] = {}
        self.rows: list[dict[str, str | None]] = []
        self.errors_box: dict[str, str | None] | None = None
        self.errors_text = ""
        self.turn_texts: list[str] = []  # the agent's text events of each turn, joined
        self.turn_events: list[list[tuple[str, int]]] = []  # (kind, count) of each turn's events
        self.latency_methods: list[str] = []
        self.chart_bars = 0
        self._capture: str | None = None
        self._event: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "body":
            self.body = a
        elif tag == "tr" and "msg" in classes:
            self.rows.append(a)
        elif tag == "tr" and a.get("data-method") and not classes:
            self.latency_methods.append(a["data-method"] or "")
        elif tag == "pre" and a.get("id") == "acp-errors":
            self.errors_box = a
            self._capture = "errors"
        elif tag == "div" and classes == ["turn"]:
            self.turn_texts.append("")
            self.turn_events.append([])
        elif tag == "div" and classes[:1] == ["ev"]:
            self._event = classes[1]
            self.turn_events[-1].append((classes[1], int(a.get("data-count") or 1)))
        elif tag == "span" and classes == ["body"] and self._event == "text":
            self._capture = "text"
        elif tag == "div" and classes == ["barbox"]:
            self.chart_bars += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("pre", "span"):
            self._capture = None

    def handle_data(self, data: str) -> None:
        if self._capture == "errors":
            self.errors_text += data
        elif self._capture == "text":
            self.turn_texts[-1] += data


def load_in_browser(browser: str, page: Path, profile: Path, fragment: str = "") -> tuple[_Dom, list[str]]:
    """The page's DOM after its scripts ran, and the browser's console lines."""
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom",
         page.as_uri() + fragment],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    dom = _Dom()
    dom.feed(done.stdout)
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return dom, console


def page_problems(dom: _Dom, console: list[str], expected_rows: int) -> list[str]:
    """Everything wrong with a loaded page (empty: it loaded cleanly and shows every row)."""
    problems = [f"console: {line}" for line in console]
    if dom.body.get("data-acp-ready") != str(expected_rows):
        problems.append(f"not rendered: data-acp-ready={dom.body.get('data-acp-ready')!r}")
    if dom.errors_box is None:
        problems.append("no #acp-errors element")
    elif "hidden" not in dom.errors_box or dom.errors_text.strip():
        problems.append(f"page errors: {dom.errors_text.strip()!r}")
    covered: set[str] = set()
    for row in dom.rows:  # a message's own row, or the row of the run of chunks it is in
        if row.get("data-first") is not None:
            covered.update(map(str, range(int(row["data-first"] or 0), int(row["data-last"] or 0) + 1)))
        elif row.get("data-index") is not None:
            covered.add(row["data-index"] or "")
    missing = sorted(set(map(str, range(expected_rows))) - covered, key=int)
    if missing:
        problems.append(f"rows missing: {missing}")
    return problems


def test_trace_html_loads_in_a_real_browser(browser: str, chat_recording: Path, tmp_path: Path) -> None:
    page = tmp_path / "trace.html"
    done = acp_cli("trace", str(chat_recording), "--html", str(page))
    assert done.returncode == 0, done.stderr
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text  # nothing fetched
    assert "<link" not in text and "src=" not in text
    trace = load_trace(chat_recording)
    dom, console = load_in_browser(browser, page, tmp_path / "profile")
    assert page_problems(dom, console, len(trace.messages)) == []
    by_index = {row["data-index"]: row for row in dom.rows}
    for message in trace.messages:  # each row is the right message
        row = by_index[str(message.index)]
        assert row["data-method"] == (message.method or "") and row["data-kind"] == message.kind
    assert "error" in (by_index[str(next(m.index for m in trace.messages if m.kind == "error"))]["class"] or "")
    assert dom.turn_texts[0] == "chunk 1/3\nchunk 2/3\nchunk 3/3\n"
    assert dom.turn_events[0] == [("update", 1), ("text", 3)]  # session_info_update, then 3 chunks as one
    kinds = [kind for kind, _ in dom.turn_events[1]]  # the permission turn, in wire order
    assert kinds == ["tool_call", "request", "answer", "tool_update", "text"]
    assert dom.turn_texts[3] == "</script><b>not markup</b>"  # shown as text, never run as markup
    assert {"session/prompt", "session/request_permission", "initialize"} <= set(dom.latency_methods)
    assert dom.chart_bars == sum(1 for t in trace.turns if t.first_update is not None) == 3  # time to first update
    assert dom.body.get("data-shown") == str(len(trace.messages))

    # The filters, preset from the location hash: one method, one session, errors only.
    prompts = sum(1 for m in trace.messages if m.method == "session/prompt")
    dom, console = load_in_browser(browser, page, tmp_path / "profile", "#method=session/prompt")
    assert console == [] and dom.body.get("data-shown") == str(prompts)
    assert sum(1 for row in dom.rows if "hidden" not in row) == prompts
    second = [m for m in trace.messages if m.session == "scenario-2"]
    dom, _ = load_in_browser(browser, page, tmp_path / "profile", "#session=scenario-2")
    assert dom.body.get("data-shown") == str(len(second)) and second
    dom, _ = load_in_browser(browser, page, tmp_path / "profile", "#errors=1")
    assert dom.body.get("data-shown") == "1"


def test_the_browser_check_catches_a_missing_row_and_a_script_error(
    browser: str, chat_recording: Path, tmp_path: Path
) -> None:
    trace = load_trace(chat_recording)
    good = render_html(trace)
    no_row = good.replace("tbody.appendChild(single);", "if (n !== 4) tbody.appendChild(single);")
    failing = good.replace("// ---- turns", "undefinedFunction();")
    logged = good.replace("// ---- turns", 'console.error("something broke");')
    assert no_row != good and failing != good and logged != good
    results: dict[str, list[str]] = {}
    for name, text in (("no_row", no_row), ("failing", failing), ("logged", logged)):
        page = tmp_path / f"{name}.html"
        page.write_text(text, encoding="utf-8")
        dom, console = load_in_browser(browser, page, tmp_path / "profile")
        results[name] = page_problems(dom, console, len(trace.messages))
    assert results["no_row"] == ["rows missing: ['4']"]
    assert any("undefinedFunction" in p for p in results["failing"])
    assert any("not rendered" in p for p in results["failing"])
    assert any("something broke" in p and p.startswith("page errors") for p in results["logged"])
    assert any("something broke" in p and p.startswith("console") for p in results["logged"])


def test_page_data_is_escaped_inside_the_script() -> None:
    trace = analyse(['{"t":0,"dir":"in","raw":"</script><script>alert(1)</script> & <!--"}'])
    text = render_html(trace)
    data = text.split('<script type="application/json" id="acp-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and ">" not in data and "&" not in data
    assert json.loads(data)["messages"][0]["body"] == "</script><script>alert(1)</script> & <!--"


