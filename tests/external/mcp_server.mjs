// An MCP server written with the official TypeScript SDK (@modelcontextprotocol/sdk), for the
// worker's MCP tests (tests/broker/mcp_proctest.cpp): Streamable HTTP on 127.0.0.1, a port of
// its own (printed as {"port": N} on its first line of output), stateful sessions.
//
// Tools: weather {city} (read-only), slow {steps, interval_ms} (a progress notification each
// interval, then its result), stall {} (one progress, then nothing until cancelled), charge
// {cents} (not idempotent). What ran is written to the file $MCP_STATS after each change:
// {"runs": {"<tool>": n}, "cancelled": n, "sessions": n}. SIGUSR1 adds the tool `added` to every
// session (the SDK tells each client its tools changed); SIGUSR2 drops every session (as a
// restarted server would).
import { randomUUID } from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

const runs = {};
let cancelled = 0;
let added = false;
const servers = [];
const transports = {};

let sessions = 0;
const report = () => {
  if (process.env.MCP_STATS) {
    fs.writeFileSync(process.env.MCP_STATS + ".new", JSON.stringify({ runs, cancelled, sessions }));
    fs.renameSync(process.env.MCP_STATS + ".new", process.env.MCP_STATS);
  }
};
const ran = (tool) => {
  runs[tool] = (runs[tool] ?? 0) + 1;
  report();
};
const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      reject(new Error("cancelled"));
    });
  });

function addExtra(server) {
  server.registerTool(
    "added",
    { description: "A tool added while the server ran", inputSchema: {} },
    async () => {
      ran("added");
      return { content: [{ type: "text", text: "added ran" }] };
    },
  );
}

function makeServer() {
  const server = new McpServer({ name: "wuhu-test", version: "1.0.0" });
  server.registerTool(
    "weather",
    {
      description: "The weather in a city",
      inputSchema: { city: z.string() },
      annotations: { readOnlyHint: true },
    },
    async ({ city }) => {
      ran("weather");
      return { content: [{ type: "text", text: `sunny in ${city}` }] };
    },
  );
  server.registerTool(
    "slow",
    {
      description: "Works in steps, telling its progress",
      inputSchema: { steps: z.number().int(), interval_ms: z.number().int() },
    },
    async ({ steps, interval_ms }, extra) => {
      ran("slow");
      const token = extra._meta?.progressToken;
      for (let i = 1; i <= steps; ++i) {
        await sleep(interval_ms, extra.signal);
        if (token !== undefined) {
          await extra.sendNotification({
            method: "notifications/progress",
            params: { progressToken: token, progress: i, total: steps },
          });
        }
      }
      return { content: [{ type: "text", text: `done after ${steps} steps` }] };
    },
  );
  server.registerTool(
    "stall",
    { description: "Starts, then says nothing", inputSchema: {} },
    async (_args, extra) => {
      ran("stall");
      const token = extra._meta?.progressToken;
      if (token !== undefined) {
        await extra.sendNotification({
          method: "notifications/progress",
          params: { progressToken: token, progress: 1 },
        });
      }
      try {
        await sleep(3600_000, extra.signal);
      } catch {
        cancelled += 1;
        report();
        throw new Error("cancelled");
      }
      return { content: [{ type: "text", text: "never" }] };
    },
  );
  server.registerTool(
    "charge",
    {
      description: "Charges a card (not idempotent)",
      inputSchema: { cents: z.number().int() },
      annotations: { idempotentHint: false },
    },
    async ({ cents }, extra) => {
      ran("charge");
      await sleep(1500, extra.signal).catch(() => {});
      return { content: [{ type: "text", text: `charged ${cents}` }] };
    },
  );
  if (added) {
    addExtra(server);
  }
  servers.push(server);
  return server;
}

async function bodyOf(req) {
  const chunks = [];
  for await (const c of req) {
    chunks.push(c);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  return text ? JSON.parse(text) : undefined;
}

const httpServer = http.createServer(async (req, res) => {
  try {
    const body = req.method === "POST" ? await bodyOf(req) : undefined;
    const sid = req.headers["mcp-session-id"];
    let transport = sid ? transports[sid] : undefined;
    if (!transport) {
      if (req.method === "POST" && !sid && isInitializeRequest(body)) {
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => {
            transports[id] = transport;
            sessions += 1;
            report();
          },
        });
        await makeServer().connect(transport);
      } else {
        res.writeHead(sid ? 404 : 400, { "content-type": "application/json" });
        res.end(
          JSON.stringify({
            jsonrpc: "2.0",
            error: { code: -32000, message: sid ? "Session not found" : "No session" },
            id: null,
          }),
        );
        return;
      }
    }
    await transport.handleRequest(req, res, body);
  } catch (e) {
    if (!res.headersSent) {
      res.writeHead(500).end(String(e));
    }
  }
});

httpServer.listen(Number(process.env.MCP_PORT ?? 0), "127.0.0.1", () => {
  console.log(JSON.stringify({ port: httpServer.address().port }));
});
process.on("SIGTERM", () => process.exit(0));
process.on("SIGUSR1", () => {
  added = true;
  for (const s of servers) {
    addExtra(s);
  }
});
process.on("SIGUSR2", () => {
  for (const id of Object.keys(transports)) {
    delete transports[id];
  }
});
report();
