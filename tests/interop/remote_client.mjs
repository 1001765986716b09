// A client written with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0) over its
// experimental remote transports, driving a remote agent (tests/test_interop_remote.py).
//
//   node [--experimental-websocket] remote_client.mjs --transport ws|http --url URL --config JSON|-
//   (--config -: the JSON on stdin)
//
// ws: `createWebSocketStream` ("@agentclientprotocol/sdk/experimental/ws-client") with the
// platform WebSocket (Node >= 22, or Node 20/21 with --experimental-websocket);
// http: `createHttpStream` ("@agentclientprotocol/sdk/experimental/http-client", global fetch).
//
// config: {prompts: [...], files: {path: text}, permission: "yes" | null, cwd}
// The prompt script is the one of tests/interop/official_remote_peer.py ("wait": cancel once
// the agent said "waiting"). Prints one JSON summary line, the same shape as that peer's.
import { readFileSync } from "node:fs";
import * as acp from "@agentclientprotocol/sdk";
import { createHttpStream } from "@agentclientprotocol/sdk/experimental/http-client";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";

const STEP_MS = 15_000;

function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0) throw new Error(`missing ${name}`);
  return process.argv[i + 1];
}

const transport = arg("--transport");
const url = arg("--url");
const rawConfig = arg("--config");
const config = JSON.parse(rawConfig === "-" ? readFileSync(0, "utf8") : rawConfig);
const files = config.files ?? {};
const summary = { steps: [], reads: [], permission_requests: [] };
const updates = []; // {sessionId, text}
let onUpdate = null;

const app = acp
  .client({ name: "ts-remote-client" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    const u = params.update;
    if (u.sessionUpdate === "agent_message_chunk" && u.content.type === "text") {
      updates.push({ sessionId: params.sessionId, text: u.content.text });
      onUpdate?.(u.content.text);
    }
  })
  .onRequest(acp.methods.client.fs.readTextFile, ({ params }) => {
    summary.reads.push(params.path);
    if (!(params.path in files)) throw acp.RequestError.resourceNotFound(params.path);
    return { content: files[params.path] };
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    summary.permission_requests.push({ sessionId: params.sessionId, options: params.options.map((o) => o.optionId) });
    if (config.permission == null) return { outcome: { outcome: "cancelled" } };
    return { outcome: { outcome: "selected", optionId: config.permission } };
  });

function withTimeout(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timeout: ${what}`)), STEP_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function step(name, promise) {
  const record = { step: name };
  summary.steps.push(record);
  try {
    const result = await withTimeout(promise, name);
    record.ok = true;
    return result;
  } catch (error) {
    record.error = String(error?.stack ?? error);
    return undefined;
  }
}

async function workflow(agent) {
  const init = await step(
    "initialize",
    agent.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: true } },
      clientInfo: { name: "ts-remote-client", version: "2.4.0" },
    }),
  );
  if (!init) return;
  summary.agent_name = init.agentInfo?.name ?? null;
  summary.protocol_version = init.protocolVersion;
  const created = await step(
    "new_session",
    agent.request(acp.methods.agent.session.new, { cwd: config.cwd ?? "/", mcpServers: [] }),
  );
  if (!created) return;
  const sessionId = created.sessionId;
  summary.session_id = sessionId;
  summary.prompts = [];
  for (const text of config.prompts ?? []) {
    const start = updates.length;
    const record = { text };
    summary.prompts.push(record);
    const request = agent.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text }],
    });
    if (text === "wait") {
      const waiting = new Promise((resolve) => {
        onUpdate = (said) => said === "waiting" && resolve();
      });
      await step("wait_for_waiting", waiting);
      await step("cancel", agent.notify(acp.methods.agent.session.cancel, { sessionId }));
    }
    const response = await step(`prompt ${text}`, request);
    onUpdate = null;
    record.stop_reason = response?.stopReason ?? null;
    record.texts = updates.slice(start).filter((u) => u.sessionId === sessionId).map((u) => u.text);
  }
}

async function main() {
  const stream = transport === "ws" ? createWebSocketStream(url) : createHttpStream(url);
  const closing = { step: "close" };
  try {
    await app.connectWith(stream, workflow);
    closing.ok = true;
  } catch (error) {
    closing.error = String(error?.stack ?? error);
  }
  summary.steps.push(closing);
}

const watchdog = setTimeout(() => {
  summary.fatal = "watchdog: the workflow did not finish within 90 s";
  process.stdout.write(JSON.stringify(summary) + "\n");
  process.exit(2);
}, 90_000);
watchdog.unref();

main()
  .catch((error) => {
    summary.fatal = String(error?.stack ?? error);
  })
  .finally(() => {
    process.stdout.write(JSON.stringify(summary) + "\n");
    clearTimeout(watchdog);
  });
