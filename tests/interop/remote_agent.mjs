// An agent written with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0), served by its
// experimental AcpServer on one node:http server for tests/test_interop_remote.py: Streamable HTTP
// (createNodeHttpHandler) and WebSocket upgrades (createNodeWebSocketUpgradeHandler with a
// `noServer` WebSocketServer of the `ws` package, pinned in package.json: the SDK does not depend
// on it). Both on any path; the tests use /acp, so http://127.0.0.1:<n>/acp and ws://127.0.0.1:<n>/acp.
//
//   node remote_agent.mjs
//
// Listens on 127.0.0.1 (port chosen by the OS), prints "PORT <n>", serves until stdin ends. Each
// request is logged on stderr as `WIRE {json}` (type "http" or "websocket" for an upgrade; method,
// path, headers) for the tests to inspect.
//
// The prompt script is the one of tests/interop/official_remote_peer.py: words come back
// upper-cased, "read PATH" reads through the client, "permission" asks, "wait" waits for cancel.
import { createServer } from "node:http";
import * as acp from "@agentclientprotocol/sdk";
import { createNodeHttpHandler, createNodeWebSocketUpgradeHandler } from "@agentclientprotocol/sdk/experimental/node";
import { AcpServer } from "@agentclientprotocol/sdk/experimental/server";
import { WebSocketServer } from "ws";

function say(client, sessionId, text) {
  return client.notify(acp.methods.client.session.update, {
    sessionId,
    update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } },
  });
}

function createAgent() {
  // One app per connection: its own session numbering and cancel waiters.
  let sessionSeq = 0;
  const cancelWaiters = new Map();
  return acp
    .agent({ name: "ts-remote-agent" })
    .onRequest(acp.methods.agent.initialize, () => ({
      protocolVersion: acp.PROTOCOL_VERSION,
      agentCapabilities: { loadSession: false },
      agentInfo: { name: "ts-remote-agent", version: "2.4.0" },
      authMethods: [],
    }))
    .onRequest(acp.methods.agent.session.new, () => ({ sessionId: `ts-${++sessionSeq}` }))
    .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
      const sessionId = params.sessionId;
      const text = params.prompt
        .filter((b) => b.type === "text")
        .map((b) => b.text)
        .join(" ");
      const words = text.split(/\s+/).filter(Boolean);
      if (words[0] === "read" && words.length === 2) {
        const answer = await client.request(acp.methods.client.fs.readTextFile, { sessionId, path: words[1] });
        await say(client, sessionId, answer.content);
      } else if (words.length === 1 && words[0] === "permission") {
        const answer = await client.request(acp.methods.client.session.requestPermission, {
          sessionId,
          toolCall: { toolCallId: "call-1", title: "touch a file", status: "pending" },
          options: [
            { optionId: "yes", name: "Allow", kind: "allow_once" },
            { optionId: "no", name: "Reject", kind: "reject_once" },
          ],
        });
        const outcome = answer.outcome;
        await say(client, sessionId, outcome.outcome === "selected" ? `allowed:${outcome.optionId}` : "cancelled");
      } else if (words.length === 1 && words[0] === "wait") {
        const cancelled = new Promise((resolve) => cancelWaiters.set(sessionId, resolve));
        await say(client, sessionId, "waiting");
        await cancelled;
        return { stopReason: "cancelled" };
      } else {
        for (const word of words) await say(client, sessionId, word.toUpperCase());
      }
      return { stopReason: "end_turn" };
    })
    .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
      cancelWaiters.get(params.sessionId)?.();
      cancelWaiters.delete(params.sessionId);
    });
}

const acpServer = new AcpServer({ createAgent });
const handle = createNodeHttpHandler(acpServer);
const wss = new WebSocketServer({ noServer: true });
const upgrade = createNodeWebSocketUpgradeHandler(acpServer, wss);

function logWire(type, req) {
  process.stderr.write(
    "WIRE " +
      JSON.stringify({
        type,
        method: req.method,
        path: req.url,
        http_version: req.httpVersion,
        headers: Object.entries(req.headers).map(([k, v]) => [k, String(v)]),
      }) +
      "\n",
  );
}

const server = createServer((req, res) => {
  logWire("http", req);
  handle(req, res);
});
server.on("upgrade", (req, socket, head) => {
  logWire("websocket", req);
  upgrade(req, socket, head);
});

server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`PORT ${server.address().port}\n`);
});

process.stdin.resume();
process.stdin.on("end", async () => {
  server.closeAllConnections?.();
  server.close();
  await acpServer.close();
  for (const ws of wss.clients) ws.terminate();
  wss.close();
  process.exit(0);
});
