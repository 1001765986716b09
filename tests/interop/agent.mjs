// An agent written with the official TypeScript SDK (@agentclientprotocol/sdk, its `agent()`
// builder over `ndJsonStream` on stdio), driven by our Python SyncClient in the interop tests.
//
//   node agent.mjs
//
// The first word of the prompt text picks what the turn does (replies are agent_message_chunk):
//   caps                       the initialize request it received, as JSON
//   stream N                   N chunks "ts-chunk-0 of N" ..
//   permission                 tool_call, session/request_permission, tool_call_update;
//                              replies "permission: <outcome JSON>"; stopReason cancelled when
//                              the outcome is "cancelled"
//   read PATH [LINE LIMIT]     fs/read_text_file; replies "read: <content>" or "error: <code> ..."
//   write PATH TEXT..          fs/write_text_file; replies "wrote: <n> chars to PATH"
//   terminal CMD ARG..         terminal/create, wait_for_exit, output, release (TerminalHandle);
//                              replies "terminal: exit=<code> signal=<sig> output=<out>"
//   wait_for_cancel            replies "waiting", then waits for session/cancel; stopReason cancelled
//   throw TEXT..               throws Error(TEXT): the SDK answers -32603 with data {details: TEXT}
// Anything else is echoed. Logs (one line per event) go to stderr.
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const log = (...args) => process.stderr.write(`[ts-agent] ${args.join(" ")}\n`);

let initializeParams = null;
let sessionSeq = 0;
const cancelWaiters = new Map(); // sessionId -> Set of resolve functions
const cancelledSessions = new Set(); // sessions with a cancel received during the current turn

function waitForCancel(sessionId) {
  if (cancelledSessions.has(sessionId)) return Promise.resolve();
  return new Promise((resolve) => {
    const set = cancelWaiters.get(sessionId) ?? new Set();
    set.add(resolve);
    cancelWaiters.set(sessionId, set);
  });
}

function say(client, sessionId, text) {
  return client.notify(acp.methods.client.session.update, {
    sessionId,
    update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } },
  });
}

function errorText(error) {
  return `error: ${error?.code ?? "?"} ${error?.message ?? String(error)}`;
}

async function prompt({ params, client }) {
  const sessionId = params.sessionId;
  cancelledSessions.delete(sessionId);
  const text = params.prompt
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("\n")
    .trim();
  const [word, ...args] = text.split(/\s+/);
  log("prompt", JSON.stringify(text));
  switch (word) {
    case "caps": {
      await say(client, sessionId, JSON.stringify(initializeParams));
      return { stopReason: "end_turn" };
    }
    case "stream": {
      const count = Number(args[0]);
      for (let i = 0; i < count; i++) await say(client, sessionId, `ts-chunk-${i} of ${count}`);
      return { stopReason: "end_turn" };
    }
    case "permission": {
      const toolCallId = `ts-call-${Date.now()}`;
      await client.notify(acp.methods.client.session.update, {
        sessionId,
        update: { sessionUpdate: "tool_call", toolCallId, title: "Delete build/", kind: "delete", status: "pending" },
      });
      const response = await client.request(acp.methods.client.session.requestPermission, {
        sessionId,
        toolCall: { toolCallId, title: "Delete build/", kind: "delete", status: "pending" },
        options: [
          { optionId: "ts-allow", name: "Allow once", kind: "allow_once" },
          { optionId: "ts-reject", name: "Reject", kind: "reject_once" },
        ],
      });
      const cancelled = response.outcome.outcome === "cancelled";
      await client.notify(acp.methods.client.session.update, {
        sessionId,
        update: { sessionUpdate: "tool_call_update", toolCallId, status: cancelled ? "failed" : "completed" },
      });
      await say(client, sessionId, `permission: ${JSON.stringify(response.outcome)}`);
      return { stopReason: cancelled || cancelledSessions.has(sessionId) ? "cancelled" : "end_turn" };
    }
    case "read": {
      const request = { sessionId, path: args[0] };
      if (args.length >= 3) {
        request.line = Number(args[1]);
        request.limit = Number(args[2]);
      }
      try {
        const response = await client.request(acp.methods.client.fs.readTextFile, request);
        await say(client, sessionId, `read: ${response.content}`);
      } catch (error) {
        await say(client, sessionId, errorText(error));
      }
      return { stopReason: "end_turn" };
    }
    case "write": {
      const path = args[0];
      const content = text.slice(text.indexOf(path) + path.length + 1);
      try {
        await client.request(acp.methods.client.fs.writeTextFile, { sessionId, path, content });
        await say(client, sessionId, `wrote: ${content.length} chars to ${path}`);
      } catch (error) {
        await say(client, sessionId, errorText(error));
      }
      return { stopReason: "end_turn" };
    }
    case "terminal": {
      const terminal = await client.createTerminal({ sessionId, command: args[0], args: args.slice(1) });
      try {
        const exit = await terminal.waitForExit();
        const output = await terminal.currentOutput();
        await say(
          client,
          sessionId,
          `terminal: exit=${exit.exitCode ?? null} signal=${exit.signal ?? null} ` +
            `status=${JSON.stringify(output.exitStatus ?? null)} truncated=${output.truncated} output=${output.output}`,
        );
      } finally {
        await terminal.release();
      }
      return { stopReason: "end_turn" };
    }
    case "wait_for_cancel": {
      await say(client, sessionId, "waiting");
      await waitForCancel(sessionId);
      return { stopReason: "cancelled" };
    }
    case "throw":
      throw new Error(text.slice(word.length + 1));
    default:
      await say(client, sessionId, `echo: ${text}`);
      return { stopReason: "end_turn" };
  }
}

const app = acp
  .agent({ name: "ts-interop-agent" })
  .onRequest(acp.methods.agent.initialize, ({ params }) => {
    initializeParams = params;
    return {
      protocolVersion: acp.PROTOCOL_VERSION,
      agentCapabilities: {
        loadSession: false,
        promptCapabilities: { image: false, audio: false, embeddedContext: true },
      },
      agentInfo: { name: "ts-interop-agent", version: "2.4.0-interop" },
      authMethods: [],
    };
  })
  .onRequest(acp.methods.agent.session.new, ({ params }) => {
    log("session/new cwd", params.cwd);
    return { sessionId: `ts-session-${++sessionSeq}` };
  })
  .onRequest(acp.methods.agent.session.prompt, prompt)
  .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
    log("session/cancel", params.sessionId);
    cancelledSessions.add(params.sessionId);
    const waiters = cancelWaiters.get(params.sessionId);
    cancelWaiters.delete(params.sessionId);
    for (const resolve of waiters ?? []) resolve();
  });

const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
connection.closed.then(
  () => {
    log("connection closed");
    // Unblock any turn still waiting so nothing keeps the event loop alive.
    for (const waiters of cancelWaiters.values()) for (const resolve of waiters) resolve();
  },
  (error) => {
    log("connection failed", String(error));
    process.exitCode = 1;
  },
);
