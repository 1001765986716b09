// A client written with the official TypeScript SDK (@agentclientprotocol/sdk, its `client()`
// builder over `ndJsonStream`) that spawns an agent and drives it through a scripted session.
//
//   node client.mjs --config '<json>' -- <agent argv...>
//
// config: {
//   cwd: "/abs/dir",                       session/new cwd
//   files: {"/abs/path": "text", ...},     the in-memory file system served to fs/*
//   steps: [{prompt: "stream 3", cancelAfterUpdates?: 1, expectError?: true,
//            permission?: "allow" | "reject" | "cancel"}, ...]
//   ("cancel": the permission handler sends session/cancel and answers "cancelled")
// }
//
// Prints one JSON summary on stdout at the end (everything seen, in order); exits 0 when the
// workflow ran to the end, 1 when it threw (the summary then has "error").
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const WATCHDOG_MS = 60_000;

function parseArgs(argv) {
  const dash = argv.indexOf("--");
  if (dash < 0 || dash === argv.length - 1) throw new Error("usage: client.mjs --config JSON -- AGENT...");
  const own = argv.slice(0, dash);
  const i = own.indexOf("--config");
  const config = i >= 0 ? JSON.parse(own[i + 1]) : {};
  return { config, agentArgv: argv.slice(dash + 1) };
}

const { config, agentArgv } = parseArgs(process.argv.slice(2));
const sdkVersion = JSON.parse(
  readFileSync(new URL("./node_modules/@agentclientprotocol/sdk/package.json", import.meta.url)),
).version;

const summary = {
  sdkVersion,
  node: process.version,
  protocolVersionConstant: acp.PROTOCOL_VERSION,
  inbound: [], // every request/notification method the client received, in order
  turns: [],
  permissionRequests: [],
  fsReads: [],
  fsWrites: [],
  terminals: { created: [], calls: [], liveAtEnd: null },
  files: null,
  agentExit: null,
};

const files = new Map(Object.entries(config.files ?? {}));
let currentTurn = null; // the turn whose updates are being collected
let permissionAnswer = "allow";

// ---------------------------------------------------------------- terminals (child_process)

const terminals = new Map();
let terminalSeq = 0;

function startTerminal(params) {
  const id = `term-${++terminalSeq}`;
  const args = params.args ?? [];
  const env = { ...process.env };
  for (const v of params.env ?? []) env[v.name] = v.value;
  // A bare command line without args is run by the shell, as editors commonly do.
  const useShell = args.length === 0 && /\s/.test(params.command);
  const child = spawn(params.command, args, {
    cwd: params.cwd ?? undefined,
    env,
    shell: useShell,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const term = {
    child,
    chunks: [],
    bytes: 0,
    truncated: false,
    limit: params.outputByteLimit ?? null,
    exitStatus: null,
  };
  const append = (buf) => {
    term.chunks.push(buf);
    term.bytes += buf.length;
    if (term.limit !== null) {
      // Keep the last `limit` bytes (the spec truncates from the beginning).
      let all = Buffer.concat(term.chunks);
      if (all.length > term.limit) {
        all = all.subarray(all.length - term.limit);
        term.truncated = true;
      }
      term.chunks = [all];
      term.bytes = all.length;
    }
  };
  child.stdout.on("data", append);
  child.stderr.on("data", append);
  term.exited = new Promise((resolve) => {
    let spawnError = null;
    child.on("error", (err) => {
      spawnError = err;
      append(Buffer.from(String(err.message)));
      term.exitStatus = { exitCode: 127, signal: null };
      resolve(term.exitStatus);
    });
    // "close": the process exited AND its stdio ended, so the output is complete.
    child.on("close", (code, signal) => {
      if (spawnError) return;
      term.exitStatus = { exitCode: code, signal: signal ?? null };
      resolve(term.exitStatus);
    });
  });
  terminals.set(id, term);
  return id;
}

function getTerminal(terminalId) {
  const term = terminals.get(terminalId);
  if (!term) throw acp.RequestError.resourceNotFound(terminalId);
  return term;
}

// ---------------------------------------------------------------- the client app

const app = acp
  .client({ name: "ts-interop-client" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    summary.inbound.push(`session/update:${params.update.sessionUpdate}`);
    if (currentTurn && params.sessionId === currentTurn.sessionId) {
      currentTurn.updates.push(params.update);
      currentTurn.onUpdate?.();
    } else {
      summary.strayUpdates = (summary.strayUpdates ?? 0) + 1;
    }
  })
  .onRequest(acp.methods.client.session.requestPermission, async ({ params, signal, agent }) => {
    summary.inbound.push("session/request_permission");
    summary.permissionRequests.push(params);
    if (permissionAnswer === "cancel") {
      // The user cancels the turn while the permission prompt is open: send session/cancel,
      // then answer "cancelled" (spec) once the agent withdraws the request ($/cancel_request,
      // which aborts `signal`) or the turn ends, whichever comes first.
      const turn = currentTurn;
      turn.cancelRequested = true;
      await agent.notify(acp.methods.agent.session.cancel, { sessionId: params.sessionId });
      const aborted = await Promise.race([
        new Promise((resolve) => {
          if (signal.aborted) resolve(true);
          else signal.addEventListener("abort", () => resolve(true), { once: true });
        }),
        turn.settled.then(() => false),
      ]);
      turn.permissionAbortedByAgent = aborted;
      return { outcome: { outcome: "cancelled" } };
    }
    const wanted = permissionAnswer === "reject" ? ["reject_once", "reject_always"] : ["allow_once", "allow_always"];
    const option = params.options.find((o) => wanted.includes(o.kind));
    if (!option) return { outcome: { outcome: "cancelled" } };
    return { outcome: { outcome: "selected", optionId: option.optionId } };
  })
  .onRequest(acp.methods.client.fs.readTextFile, ({ params }) => {
    summary.inbound.push("fs/read_text_file");
    summary.fsReads.push(params);
    if (!files.has(params.path)) throw acp.RequestError.resourceNotFound(params.path);
    let content = files.get(params.path);
    if (params.line != null || params.limit != null) {
      const lines = content.split(/(?<=\n)/);
      const start = Math.max((params.line ?? 1) - 1, 0);
      const end = params.limit != null ? start + params.limit : lines.length;
      content = lines.slice(start, end).join("");
    }
    return { content };
  })
  .onRequest(acp.methods.client.fs.writeTextFile, ({ params }) => {
    summary.inbound.push("fs/write_text_file");
    summary.fsWrites.push(params);
    files.set(params.path, params.content);
    return {};
  })
  .onRequest(acp.methods.client.terminal.create, ({ params }) => {
    summary.inbound.push("terminal/create");
    summary.terminals.created.push(params);
    const terminalId = startTerminal(params);
    summary.terminals.calls.push(["create", terminalId]);
    return { terminalId };
  })
  .onRequest(acp.methods.client.terminal.output, ({ params }) => {
    summary.inbound.push("terminal/output");
    summary.terminals.calls.push(["output", params.terminalId]);
    const term = getTerminal(params.terminalId);
    return {
      output: Buffer.concat(term.chunks).toString("utf8"),
      truncated: term.truncated,
      exitStatus: term.exitStatus,
    };
  })
  .onRequest(acp.methods.client.terminal.waitForExit, async ({ params }) => {
    summary.inbound.push("terminal/wait_for_exit");
    summary.terminals.calls.push(["wait_for_exit", params.terminalId]);
    const status = await getTerminal(params.terminalId).exited;
    return { exitCode: status.exitCode, signal: status.signal };
  })
  .onRequest(acp.methods.client.terminal.kill, ({ params }) => {
    summary.inbound.push("terminal/kill");
    summary.terminals.calls.push(["kill", params.terminalId]);
    const term = getTerminal(params.terminalId);
    if (term.exitStatus === null) term.child.kill("SIGTERM");
    return {};
  })
  .onRequest(acp.methods.client.terminal.release, ({ params }) => {
    summary.inbound.push("terminal/release");
    summary.terminals.calls.push(["release", params.terminalId]);
    const term = getTerminal(params.terminalId);
    if (term.exitStatus === null) term.child.kill("SIGKILL");
    terminals.delete(params.terminalId);
    return {};
  });

// ---------------------------------------------------------------- the workflow

async function runTurn(agent, session, step) {
  const turn = { prompt: step.prompt, sessionId: session.sessionId, updates: [] };
  currentTurn = turn;
  permissionAnswer = step.permission ?? "allow";
  let cancelSent = null;
  if (step.cancelAfterUpdates) {
    // Cancel mid-turn once the agent has streamed that many updates (event-driven, no timers).
    cancelSent = new Promise((resolve, reject) => {
      turn.onUpdate = () => {
        if (turn.updates.length === step.cancelAfterUpdates && !turn.cancelRequested) {
          turn.cancelRequested = true;
          agent
            .notify(acp.methods.agent.session.cancel, { sessionId: session.sessionId })
            .then(resolve, reject);
        }
      };
    });
  }
  let failed = false;
  let settle;
  turn.settled = new Promise((resolve) => (settle = resolve));
  try {
    const response = await session.prompt(step.prompt);
    turn.stopReason = response.stopReason;
    turn.response = response;
  } catch (error) {
    // Only a step that expects it may fail; the error is recorded as the agent sent it.
    if (!step.expectError) throw error;
    failed = true;
    turn.error = { code: error?.code ?? null, message: error?.message ?? String(error), data: error?.data ?? null };
  }
  settle();
  // What the notification handler had seen when the prompt's answer was delivered.
  turn.updatesWhenAnswered = turn.updates.length;
  if (cancelSent) {
    await cancelSent;
    turn.cancelSent = true;
  }
  // The same turn as ActiveSession's queue reports it: updates then a "stop" message (or,
  // for a failed prompt, the error once the queued updates are drained).
  turn.queued = [];
  for (;;) {
    let message;
    try {
      message = await session.nextUpdate();
    } catch (error) {
      if (!failed) throw error;
      turn.queuedError = error?.code ?? String(error);
      break;
    }
    if (message.kind === "stop") {
      turn.queuedStopReason = message.stopReason;
      break;
    }
    turn.queued.push(message.update);
  }
  delete turn.onUpdate;
  delete turn.sessionId;
  delete turn.settled;
  currentTurn = null;
  summary.turns.push(turn);
}

async function workflow(agent) {
  summary.initialize = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
    clientInfo: { name: "ts-interop-client", version: sdkVersion },
  });
  const session = await agent.buildSession(config.cwd ?? process.cwd()).start();
  summary.newSession = session.newSessionResponse;
  try {
    for (const step of config.steps ?? []) {
      await runTurn(agent, session, step);
    }
  } finally {
    session.dispose();
  }
}

function waitForExit(child) {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  }
  return new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
}

async function main() {
  const watchdog = setTimeout(() => {
    summary.error = `watchdog: the workflow did not finish within ${WATCHDOG_MS} ms`;
    process.stdout.write(JSON.stringify(summary) + "\n");
    process.exit(2);
  }, WATCHDOG_MS);
  watchdog.unref();

  const child = spawn(agentArgv[0], agentArgv.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
  const spawned = new Promise((resolve, reject) => {
    child.once("spawn", resolve);
    child.once("error", reject);
  });
  await spawned;
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  let failed = false;
  try {
    await app.connectWith(stream, workflow);
  } catch (error) {
    failed = true;
    summary.error = String(error?.stack ?? error);
    if (error && typeof error === "object" && "code" in error) summary.errorCode = error.code;
  }
  // connectWith closed the connection; end the agent's input and wait for it to exit.
  if (!child.stdin.destroyed) child.stdin.end();
  summary.agentExit = await waitForExit(child);
  for (const term of terminals.values()) if (term.exitStatus === null) term.child.kill("SIGKILL");
  summary.terminals.liveAtEnd = terminals.size;
  summary.files = Object.fromEntries(files);
  process.stdout.write(JSON.stringify(summary) + "\n");
  clearTimeout(watchdog);
  process.exitCode = failed ? 1 : 0;
}

main().catch((error) => {
  summary.error = String(error?.stack ?? error);
  process.stdout.write(JSON.stringify(summary) + "\n");
  process.exitCode = 1;
});
