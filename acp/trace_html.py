"""The HTML page of ``acp trace --html``: one self-contained file, inline CSS and JavaScript,
nothing fetched from the network.

The trace is embedded as JSON (with ``<``, ``>`` and ``&`` escaped, so no message can end the
script element) and the page's script builds everything with ``textContent``, never
``innerHTML``: a recording is data, never markup. The page records its own script errors (and
``console.error`` calls) in ``#acp-errors`` and sets ``data-acp-ready`` on ``<body>`` once it has
rendered, which is what the browser test looks at. A location hash such as
``#session=ID&method=session/update&errors=1`` presets the filters.
"""

from __future__ import annotations

import html
import json
from typing import Any

from .trace import Trace, chunk_runs, method_latencies

__all__ = ["render_html"]


def page_data(trace: Trace) -> dict[str, Any]:
    """The JSON the page is built from."""
    messages = trace.messages
    return {
        "source": trace.source,
        "span": (messages[-1].t if messages else 0.0),
        "timed": trace.timed,
        "sessions": trace.sessions,
        "methods": trace.methods,
        "problems": trace.problems,
        "messages": [
            {
                "i": m.index, "t": m.t, "from": m.sender, "kind": m.kind, "method": m.method,
                "id": m.id, "session": m.session, "pair": m.pair, "latency": m.latency,
                "summary": m.summary, "body": m.msg if m.msg is not None else m.raw, "line": m.line,
            }
            for m in messages
        ],
        # Runs of consecutive chunks of one kind and session: [first, last, update kind].
        "groups": [[first, last, messages[first].update_kind] for first, last in chunk_runs(messages)],
        "turns": [
            {
                "request": t.request, "answer": t.answer, "session": t.session, "prompt": t.prompt,
                "reply": t.reply, "thoughts": t.thoughts, "tools": t.tool_calls,
                "stop": t.stop_reason, "error": t.error, "duration": t.duration, "first": t.first_update,
                "events": [
                    {"kind": e.kind, "text": e.text, "first": e.first, "last": e.last, "count": e.count,
                     "method": e.method, "status": e.status, "t": e.t}
                    for e in t.events
                ],
            }
            for t in trace.turns
        ],
        "latency": [
            {"method": s.method, "asker": s.asker, "count": s.count, "p50": s.p50, "p90": s.p90, "max": s.max}
            for s in method_latencies(trace)
        ],
    }


def _embed(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    # Inside <script>, "</script>" or "<!--" in a message must not end or change the element.
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(trace: Trace) -> str:
    """The page for ``trace``, as one string."""
    title = html.escape(f"acp trace: {trace.source}")
    return _PAGE.replace("{{TITLE}}", title).replace("{{DATA}}", _embed(page_data(trace)))


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{TITLE}}</title>
<script>
// First of all: keep any error of this page where a person (and the browser test) can see it.
window.acpErrors = [];
(function () {
  function report(text) {
    window.acpErrors.push(String(text));
    var box = document.getElementById("acp-errors");
    if (box) { box.textContent = window.acpErrors.join("\\n"); box.hidden = false; }
  }
  window.addEventListener("error", function (e) { report("error: " + e.message + " (line " + e.lineno + ")"); });
  window.addEventListener("unhandledrejection", function (e) { report("unhandled rejection: " + e.reason); });
  var original = console.error;
  console.error = function () {
    report("console.error: " + Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
  window.acpReport = report;
})();
</script>
<style>
:root { --fg: #1d1f23; --muted: #6a7079; --line: #e3e5e8; --client: #2563c9; --agent: #1f8a4c;
        --err: #c62828; --errbg: #fdecea; --sel: #fff6d6; --bg: #ffffff; --panel: #f6f7f9; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { padding: 12px 20px; border-bottom: 1px solid var(--line); background: var(--panel); }
h1 { font-size: 17px; margin: 0 0 4px; }
h2 { font-size: 15px; margin: 18px 20px 8px; }
.stats { color: var(--muted); }
.stats b { color: var(--fg); }
#acp-errors { margin: 10px 20px; padding: 8px 12px; background: var(--errbg); color: var(--err); white-space: pre-wrap; }
.filters { display: flex; flex-wrap: wrap; gap: 14px; align-items: center; padding: 10px 20px;
           border-bottom: 1px solid var(--line); position: sticky; top: 0; background: var(--bg); z-index: 2; }
.filters label { color: var(--muted); }
.filters select, .filters input[type=search] { font: inherit; padding: 2px 4px; }
table { border-collapse: collapse; width: 100%; }
th { text-align: left; font-weight: 600; color: var(--muted); padding: 4px 8px; border-bottom: 1px solid var(--line); }
td { padding: 3px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
tr.msg { cursor: pointer; }
tr.msg:hover { background: var(--panel); }
tr.msg.error td { background: var(--errbg); }
tr.msg.error td.summary { color: var(--err); font-weight: 600; }
tr.msg.flash td { background: var(--sel); }
td.t, td.lat { font-variant-numeric: tabular-nums; text-align: right; white-space: nowrap; color: var(--muted); }
td.dir { white-space: nowrap; font-weight: 600; }
td.dir.client { color: var(--client); }
td.dir.agent { color: var(--agent); }
td.kind { color: var(--muted); white-space: nowrap; }
td.method { font-family: ui-monospace, Menlo, Consolas, monospace; white-space: nowrap; }
td.summary { color: var(--fg); word-break: break-word; }
td.id { white-space: nowrap; }
td.id a { color: inherit; font-family: ui-monospace, Menlo, Consolas, monospace; }
td.session { white-space: nowrap; color: var(--muted); }
td.bar { width: 18%; min-width: 120px; padding: 6px 8px; }
.track { position: relative; height: 8px; background: var(--panel); border-radius: 4px; }
.track span { position: absolute; top: 0; height: 8px; min-width: 3px; border-radius: 4px; opacity: .8; }
.track span.client { background: var(--client); }
.track span.agent { background: var(--agent); }
.track span.error { background: var(--err); }
tr.detail td { background: var(--panel); padding: 8px 12px 10px 40px; }
.json { font: 12.5px/1.4 ui-monospace, Menlo, Consolas, monospace; }
.json details { margin-left: 14px; }
.json summary { cursor: pointer; margin-left: -14px; list-style-position: inside; }
.json .k { color: #8a3ea8; }
.json .s { color: #a0501a; white-space: pre-wrap; word-break: break-word; }
.json .n { color: #1c6fb0; }
.json .b { color: #b0421c; }
.json .row { margin-left: 14px; }
.turns { padding: 0 20px 10px; display: grid; gap: 10px; }
.turn { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; }
.turn .head { color: var(--muted); margin-bottom: 4px; }
.turn .prompt { font-weight: 600; white-space: pre-wrap; }
.turn .reply { white-space: pre-wrap; margin: 4px 0; }
.turn .thoughts { white-space: pre-wrap; color: var(--muted); font-style: italic; }
.turn .stop.error { color: var(--err); font-weight: 600; }
.muted { color: var(--muted); }
.ev { margin: 2px 0; }
.ev .tag { display: inline-block; min-width: 92px; color: var(--muted); font-size: 12px; }
.ev.text .body { white-space: pre-wrap; }
.ev.thought .body { white-space: pre-wrap; color: var(--muted); font-style: italic; }
.ev details { display: inline-block; vertical-align: top; }
.ev details summary { cursor: pointer; color: var(--muted); }
.ev details .body { display: block; white-space: pre-wrap; max-height: 24em; overflow: auto; }
.status { font-size: 12px; padding: 0 6px; border-radius: 8px; background: var(--panel); border: 1px solid var(--line); }
.status.completed { color: var(--agent); } .status.failed, .status.error { color: var(--err); }
.ev.request .body, .ev.answer .body, .ev.cancel .body { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12.5px; }
tr.msg.group td.summary { font-style: italic; }
.stats-tables { padding: 0 20px; display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
.stats-tables table { width: auto; }
.stats-tables td.num { text-align: right; font-variant-numeric: tabular-nums; }
.chart { display: grid; grid-template-columns: max-content 240px max-content; gap: 3px 8px; align-items: center; }
.chart .barbox { background: var(--panel); height: 10px; border-radius: 5px; position: relative; }
.chart .barbox span { position: absolute; left: 0; top: 0; height: 10px; border-radius: 5px; background: var(--agent); min-width: 2px; }
</style>
</head>
<body>
<header>
  <h1 id="title"></h1>
  <div class="stats" id="stats"></div>
</header>
<pre id="acp-errors" hidden></pre>
<h2>Turns</h2>
<div class="turns" id="turns"></div>
<h2>Latency</h2>
<div class="stats-tables" id="latency"></div>
<h2>Messages</h2>
<div class="filters">
  <label>session <select id="f-session"><option value="">all</option></select></label>
  <label>method <select id="f-method"><option value="">all</option></select></label>
  <label><input type="checkbox" id="f-errors"> errors only</label>
  <label><input type="checkbox" id="f-updates" checked> session/update</label>
  <label>text <input type="search" id="f-text" placeholder="search summaries"></label>
  <span class="muted" id="shown"></span>
</div>
<table id="messages">
  <thead><tr><th>time (s)</th><th>from</th><th>id</th><th>kind</th><th>method</th><th>session</th>
  <th>summary</th><th>latency</th><th>timeline</th></tr></thead>
  <tbody id="rows"></tbody>
</table>
<script type="application/json" id="acp-data">{{DATA}}</script>
<script>
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("acp-data").textContent);
  var messages = data.messages;
  var span = data.span > 0 ? data.span : 1;
  var sessionNames = {};
  data.sessions.forEach(function (s, n) { sessionNames[s] = "s" + (n + 1); });

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }
  function ms(seconds) { return seconds === null || seconds === undefined ? "" : (seconds * 1000).toFixed(1) + " ms"; }
  function idText(id) { return typeof id === "string" ? id : JSON.stringify(id); }

  // ---- header
  document.getElementById("title").textContent = "acp trace: " + data.source;
  var errors = messages.filter(function (m) { return m.kind === "error" || m.kind === "invalid"; }).length;
  var unanswered = messages.filter(function (m) { return m.kind === "request" && m.pair === null; }).length;
  var stats = document.getElementById("stats");
  [["messages", messages.length], ["seconds", data.span.toFixed(3)], ["sessions", data.sessions.length],
   ["turns", data.turns.length], ["errors", errors], ["unanswered requests", unanswered]].forEach(function (p, n) {
    if (n) stats.appendChild(document.createTextNode(" · "));
    stats.appendChild(el("b", null, String(p[1])));
    stats.appendChild(document.createTextNode(" " + p[0]));
  });
  data.problems.forEach(function (p) { stats.appendChild(el("div", null, "warning: " + p)); });

  // ---- collapsible JSON
  function jsonNode(value, key, open) {
    var label = key === null ? "" : key + ": ";
    if (value !== null && typeof value === "object") {
      var isArray = Array.isArray(value);
      var keys = isArray ? value.map(function (_, i) { return i; }) : Object.keys(value);
      var box = el("details");
      box.open = open;
      var head = el("summary");
      if (key !== null) head.appendChild(el("span", "k", label));
      head.appendChild(document.createTextNode((isArray ? "[" : "{") + " " + keys.length + (isArray ? " items ]" : " keys }")));
      box.appendChild(head);
      var filled = false;
      function fill() {  // children are built when first opened: big recordings stay quick
        if (filled) return;
        filled = true;
        keys.forEach(function (k) { box.appendChild(jsonNode(value[k], isArray ? String(k) : JSON.stringify(k), false)); });
      }
      if (open) fill(); else box.addEventListener("toggle", fill);
      return box;
    }
    var row = el("div", "row");
    if (key !== null) row.appendChild(el("span", "k", label));
    var cls = typeof value === "string" ? "s" : typeof value === "number" ? "n" : "b";
    row.appendChild(el("span", cls, JSON.stringify(value)));
    return row;
  }

  // ---- message rows (runs of chunks are one row until expanded)
  var tbody = document.getElementById("rows");
  var entries = [];  // {tr, first, last}: a message row, or a collapsed run of them
  var groupAt = {};
  data.groups.forEach(function (g) { groupAt[g[0]] = g; });

  function messageRow(m) {
    var tr = el("tr", "msg " + m.kind + (m.kind === "error" || m.kind === "invalid" ? " error" : ""));
    tr.id = "m" + m.i;
    tr.dataset.index = m.i;
    tr.dataset.method = m.method || "";
    tr.dataset.session = m.session || "";
    tr.dataset.kind = m.kind;
    tr.appendChild(el("td", "t", m.t.toFixed(3)));
    tr.appendChild(el("td", "dir " + m.from, m.from === "client" ? "client → agent" : "agent → client"));
    var idCell = el("td", "id");
    if (m.id !== null && m.id !== undefined && m.kind !== "notification") {
      var text = "#" + idText(m.id) + (m.kind === "request" ? "" : " ↩");
      if (m.pair !== null) {
        var link = el("a", null, text);
        link.href = "#m" + m.pair;
        link.title = m.kind === "request" ? "go to the answer" : "go to the request";
        link.addEventListener("click", function (e) { e.preventDefault(); e.stopPropagation(); jump(m.pair); });
        idCell.appendChild(link);
      } else {
        idCell.textContent = text;
      }
    }
    tr.appendChild(idCell);
    tr.appendChild(el("td", "kind", m.kind));
    tr.appendChild(el("td", "method", m.method || ""));
    tr.appendChild(el("td", "session", m.session ? sessionNames[m.session] : ""));
    var summary = m.summary;
    if (m.kind === "request" && m.pair === null) summary = (summary + " (no answer)").trim();
    tr.appendChild(el("td", "summary", summary));
    tr.appendChild(el("td", "lat", m.kind === "request" ? "" : ms(m.latency)));
    tr.appendChild(timelineCell(m.kind === "request" || m.latency === null ? m.t : m.t - m.latency,
                                m.latency, m.kind === "error" || m.kind === "invalid" ? "error" : m.from));
    var detail = null;
    tr.addEventListener("click", function () {
      if (detail) { detail.remove(); detail = null; return; }
      detail = el("tr", "detail");
      var cell = el("td");
      cell.colSpan = 9;
      var body = el("div", "json");
      body.appendChild(typeof m.body === "string" ? el("div", "s", m.body) : jsonNode(m.body, null, true));
      cell.appendChild(body);
      detail.appendChild(cell);
      tr.after(detail);
    });
    return tr;
  }

  function timelineCell(start, width, cls) {
    var bar = el("td", "bar");
    var track = el("div", "track");
    var mark = el("span", cls);
    mark.style.left = (100 * start / span).toFixed(3) + "%";
    var w = width !== null && width !== undefined ? 100 * width / span : 0;
    mark.style.width = Math.max(0, Math.min(w, 100 - 100 * start / span)).toFixed(3) + "%";
    track.appendChild(mark);
    bar.appendChild(track);
    return bar;
  }

  function groupRow(g) {
    var first = messages[g[0]], last = messages[g[1]], count = g[1] - g[0] + 1;
    var tr = el("tr", "msg notification group");
    tr.id = "m" + g[0];
    tr.dataset.index = g[0];
    tr.dataset.first = g[0];
    tr.dataset.last = g[1];
    tr.dataset.method = first.method || "";
    tr.dataset.session = first.session || "";
    tr.dataset.kind = first.kind;
    tr.appendChild(el("td", "t", first.t.toFixed(3)));
    tr.appendChild(el("td", "dir " + first.from, first.from === "client" ? "client → agent" : "agent → client"));
    tr.appendChild(el("td", "id", "×" + count));
    tr.appendChild(el("td", "kind", first.kind));
    tr.appendChild(el("td", "method", first.method || ""));
    tr.appendChild(el("td", "session", first.session ? sessionNames[first.session] : ""));
    tr.appendChild(el("td", "summary", g[2] + " ×" + count + " over " + ms(last.t - first.t) + " (click to show each)"));
    tr.appendChild(el("td", "lat", ""));
    tr.appendChild(timelineCell(first.t, last.t - first.t, first.from));
    var shown = null;
    tr.addEventListener("click", function () {
      if (shown) { shown.forEach(function (r) { r.remove(); }); shown = null; return; }
      shown = [];
      var after = tr;
      for (var i = g[0]; i <= g[1]; i++) {  // built on demand: a 20,000-chunk run costs nothing until asked
        var row = messageRow(messages[i]);
        row.classList.add("in-group");
        after.after(row);
        after = row;
        shown.push(row);
      }
    });
    return tr;
  }

  for (var n = 0; n < messages.length; n++) {
    var g = groupAt[n];
    if (g) {
      var row = groupRow(g);
      tbody.appendChild(row);
      entries.push({tr: row, m: messages[n], count: g[1] - g[0] + 1});
      n = g[1];
    } else {
      var single = messageRow(messages[n]);
      tbody.appendChild(single);
      entries.push({tr: single, m: messages[n], count: 1});
    }
  }

  function jump(index) {
    var target = document.getElementById("m" + index);
    if (!target) {  // inside a collapsed run: open it first
      var owner = data.groups.filter(function (g) { return g[0] <= index && index <= g[1]; })[0];
      var head = owner && document.getElementById("m" + owner[0]);
      if (head) { head.click(); target = document.getElementById("m" + index); }
    }
    if (!target) return;
    target.hidden = false;
    target.scrollIntoView({block: "center"});
    target.classList.add("flash");
    setTimeout(function () { target.classList.remove("flash"); }, 1200);
  }

  // ---- turns
  // Each turn in wire order: what the agent streamed, did and asked, interleaved as it happened.
  var turnsBox = document.getElementById("turns");
  if (!data.turns.length) turnsBox.appendChild(el("div", "muted", "no session/prompt in this recording"));
  var tags = {text: "agent", thought: "thought", user: "user", tool_call: "tool call", tool_update: "tool update",
              plan: "plan", request: "agent asks", answer: "client answers", cancel: "client", update: "update"};
  data.turns.forEach(function (turn, n) {
    var box = el("div", "turn");
    box.dataset.request = turn.request;
    var head = el("div", "head");
    var link = el("a", null, "turn " + (n + 1));
    link.href = "#m" + turn.request;
    link.addEventListener("click", function (e) { e.preventDefault(); jump(turn.request); });
    head.appendChild(link);
    head.appendChild(document.createTextNode(" · " + (turn.session ? sessionNames[turn.session] + " (" + turn.session + ")" : "no session")
      + (data.timed && turn.duration !== null ? " · " + ms(turn.duration) : "")
      + (data.timed && turn.first !== null ? " · first update after " + ms(turn.first) : "")));
    box.appendChild(head);
    box.appendChild(el("div", "prompt", "you> " + turn.prompt));
    turn.events.forEach(function (e) {
      var row = el("div", "ev " + e.kind);
      row.dataset.first = e.first;
      row.dataset.count = e.count;
      row.appendChild(el("span", "tag", tags[e.kind] || e.kind));
      var text = e.kind === "request" || e.kind === "answer" ? e.method + (e.text ? ": " + e.text : "") : e.text;
      if (e.count > 1) {  // a run of chunks: one row, the text on demand
        var more = el("details");
        more.appendChild(el("summary", null, e.count + " chunks · " + text.length + " characters: "
          + (text.length > 80 ? text.slice(0, 79) + "…" : text)));
        more.appendChild(el("span", "body", text));
        row.appendChild(more);
      } else {
        row.appendChild(el("span", "body", text));
      }
      if (e.status) { row.appendChild(document.createTextNode(" ")); row.appendChild(el("span", "status " + e.status, e.status)); }
      box.appendChild(row);
    });
    var stop = turn.error ? turn.error : turn.stop ? "stop reason: " + turn.stop : "no answer";
    box.appendChild(el("div", "stop" + (turn.error || !turn.stop ? " error" : ""), stop));
    turnsBox.appendChild(box);
  });

  // ---- latency per method, and time to first update per turn (a chart)
  var latencyBox = document.getElementById("latency");
  if (!data.timed) {
    latencyBox.appendChild(el("div", "muted", "this recording has no times (plain JSON-RPC)"));
  } else {
    var table = el("table");
    table.id = "latency-table";
    var headRow = el("tr");
    ["method", "asked by", "count", "p50", "p90", "max"].forEach(function (h) { headRow.appendChild(el("th", null, h)); });
    table.appendChild(headRow);
    data.latency.forEach(function (s) {
      var tr = el("tr");
      tr.dataset.method = s.method;
      tr.appendChild(el("td", "method", s.method));
      tr.appendChild(el("td", null, s.asker));
      tr.appendChild(el("td", "num", String(s.count)));
      [s.p50, s.p90, s.max].forEach(function (v) { tr.appendChild(el("td", "num", ms(v))); });
      table.appendChild(tr);
    });
    if (data.latency.length) latencyBox.appendChild(table);
    var firsts = data.turns.map(function (t, n) { return [n + 1, t.first]; }).filter(function (p) { return p[1] !== null; });
    if (firsts.length) {
      var chart = el("div", "chart");
      chart.id = "first-update-chart";
      chart.appendChild(el("div", "muted", "turn"));
      chart.appendChild(el("div", "muted", "time to first update"));
      chart.appendChild(el("div"));
      var longest = Math.max.apply(null, firsts.map(function (p) { return p[1]; })) || 1;
      firsts.forEach(function (p) {
        chart.appendChild(el("div", null, "turn " + p[0]));
        var box = el("div", "barbox");
        var bar = el("span");
        bar.style.width = (100 * p[1] / longest).toFixed(1) + "%";
        box.appendChild(bar);
        chart.appendChild(box);
        chart.appendChild(el("div", "num", ms(p[1])));
      });
      latencyBox.appendChild(chart);
    }
  }

  // ---- filters
  var fSession = document.getElementById("f-session"), fMethod = document.getElementById("f-method");
  var fErrors = document.getElementById("f-errors"), fUpdates = document.getElementById("f-updates");
  var fText = document.getElementById("f-text");
  data.sessions.forEach(function (s) { var o = el("option", null, sessionNames[s] + "  " + s); o.value = s; fSession.appendChild(o); });
  data.methods.forEach(function (m) { var o = el("option", null, m); o.value = m; fMethod.appendChild(o); });
  var hash = new URLSearchParams(location.hash.replace(/^#/, ""));
  if (hash.has("session")) fSession.value = hash.get("session");
  if (hash.has("method")) fMethod.value = hash.get("method");
  if (hash.get("errors") === "1") fErrors.checked = true;
  if (hash.get("updates") === "0") fUpdates.checked = false;
  if (hash.has("text")) fText.value = hash.get("text");

  function apply() {
    var session = fSession.value, method = fMethod.value, onlyErrors = fErrors.checked;
    var updates = fUpdates.checked, text = fText.value.toLowerCase(), shown = 0;
    entries.forEach(function (entry) {
      var m = entry.m;
      var visible = (!session || m.session === session) && (!method || m.method === method)
        && (!onlyErrors || m.kind === "error" || m.kind === "invalid")
        && (updates || method === "session/update" || m.method !== "session/update")
        && (!text || (m.summary + " " + (m.method || "")).toLowerCase().indexOf(text) >= 0);
      entry.tr.hidden = !visible;
      var next = entry.tr.nextElementSibling;
      while (next && (next.classList.contains("detail") || next.classList.contains("in-group"))) {
        next.hidden = !visible;
        next = next.nextElementSibling;
      }
      if (visible) shown += entry.count;
    });
    document.getElementById("shown").textContent = shown + " of " + messages.length + " shown";
    document.body.dataset.shown = shown;
  }
  [fSession, fMethod, fErrors, fUpdates].forEach(function (x) { x.addEventListener("change", apply); });
  fText.addEventListener("input", apply);
  apply();
  document.body.dataset.acpReady = String(messages.length);
})();
</script>
</body>
</html>
"""
