// A real fleet for the console's browser tests: nats-server with a WebSocket listener and the
// single-account users of docs/examples/nats-single-account.conf (plus `viewer`, who may read
// but not command), and wuhu-workers on SQLite with the scripted model. Everything binds
// 127.0.0.1 on free ports and is stopped by PID.
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { connect, StringCodec } from "nats";
import puppeteer from "puppeteer-core";

const sc = StringCodec();
export const here = path.dirname(new URL(import.meta.url).pathname);
export const root = path.resolve(here, "../..");

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// When `proc` has exited (at once if it has: by a signal, its exitCode stays null).
const exited = (proc) => (proc.exitCode !== null || proc.signalCode !== null ? Promise.resolve()
  : new Promise((resolve) => proc.once("exit", resolve)));

export async function until(what, f, ms = 20000) {
  const giveUp = Date.now() + ms;
  let last;
  while (Date.now() < giveUp) {
    try {
      last = await f();
      if (last) {
        return last;
      }
    } catch (e) {
      last = e;
    }
    await sleep(50);
  }
  throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
}

async function listening(port, proc, log) {
  await until(`a listener on port ${port}`, () => {
    if (proc.exitCode !== null) {
      throw new Error(`exited ${proc.exitCode}: ${fs.readFileSync(log, "utf8")}`);
    }
    return new Promise((resolve) => {
      const c = net.connect(port, "127.0.0.1", () => {
        c.end();
        resolve(true);
      });
      c.on("error", () => resolve(false));
    });
  });
}

export class Fleet {
  constructor(dir) {
    this.dir = dir;
    this.workers = new Map(); // id -> {proc, metrics}
  }

  // `tenants`: docs/examples/nats-tenants.conf and workers with --tenancy, instead of the
  // single account.
  static async start({ script, workers = ["w1", "w2"], extraUsers = "", tenants = false }) {
    const fleet = new Fleet(fs.mkdtempSync(path.join(os.tmpdir(), "wuhu-console-")));
    fleet.script = path.join(fleet.dir, "script.json");
    fs.writeFileSync(fleet.script, JSON.stringify(script));
    fleet.natsPort = await freePort();
    fleet.wsPort = await freePort();
    fleet.routePort = await freePort();
    fleet.edgePorts = { nats: await freePort(), ws: await freePort(), route: await freePort() };
    const example = fs.readFileSync(path.join(root, "docs/examples/nats-single-account.conf"), "utf8");
    // The documented users, on this run's ports, a WebSocket listener, and `viewer`; a route
    // port, for the edge server (startEdge).
    const tenantsConf = fs.readFileSync(path.join(root, "docs/examples/nats-tenants.conf"), "utf8");
    fleet.workerArgs = tenants ? ["--tenancy"] : [];
    fleet.config = ({ port, ws, route, routes = [] }) => {
      if (tenants) {
        const conf = tenantsConf.replace(/^port: 4222$/m, `host: 127.0.0.1\nport: ${port}`) + `
websocket {
  host: 127.0.0.1
  port: ${ws}
  no_tls: true
}
`;
        if (!conf.includes(`port: ${port}`)) {
          throw new Error("docs/examples/nats-tenants.conf changed: the test cannot adapt it");
        }
        return conf;
      }
      const conf = example.replace(/^port: 4222$/m, `host: 127.0.0.1\nport: ${port}`)
        .replace(/^authorization \{\n {2}users = \[/m, `authorization {
  users = [
    { user: viewer, password: viewer-password,
      permissions: {
        publish: { allow: ["wuhu.session.*.subscribe", "wuhu.admin.sessions"] }
        subscribe: { allow: ["wuhu.events.>", "_INBOX_viewer.>"] }
      }
    }
${extraUsers}`) + `
websocket {
  host: 127.0.0.1
  port: ${ws}
  no_tls: true
}
cluster {
  name: wuhu-console-test
  no_advertise: true  # a browser reconnects only to the server it was given
  host: 127.0.0.1
  port: ${route}
  routes: [${routes.map((r) => `"nats-route://127.0.0.1:${r}"`).join(", ")}]
}
`;
      if (!conf.includes("viewer-password") || !conf.includes(`port: ${port}`)) {
        throw new Error("docs/examples/nats-single-account.conf changed: the test cannot adapt it");
      }
      return conf;
    };
    fs.writeFileSync(path.join(fleet.dir, "nats.conf"),
      fleet.config({ port: fleet.natsPort, ws: fleet.wsPort, route: fleet.routePort }));
    const natsLog = path.join(fleet.dir, "nats.log");
    fleet.nats = spawn("nats-server", ["-c", path.join(fleet.dir, "nats.conf"), "-l", natsLog],
      { stdio: "ignore" });
    await listening(fleet.natsPort, fleet.nats, natsLog);
    await listening(fleet.wsPort, fleet.nats, natsLog);
    for (const id of workers) {
      await fleet.startWorker(id);
    }
    fleet.nc = await connect({ servers: `127.0.0.1:${fleet.natsPort}`, user: "operator",
      pass: "operator-password", inboxPrefix: "_INBOX_operator" });
    return fleet;
  }

  get wsUrl() {
    return `ws://127.0.0.1:${this.wsPort}`;
  }

  // A second nats-server, routed to the first, with a WebSocket listener of its own (edgeWsUrl):
  // a browser connected there loses its connection when it stops, while the workers (on the
  // first) go on. Started again on the same ports.
  async startEdge() {
    const conf = path.join(this.dir, "edge.conf");
    fs.writeFileSync(conf, this.config({ port: this.edgePorts.nats, ws: this.edgePorts.ws,
      route: this.edgePorts.route, routes: [this.routePort] }));
    const log = path.join(this.dir, "edge.log");
    this.edge = spawn("nats-server", ["-c", conf, "-l", log], { stdio: "ignore" });
    await listening(this.edgePorts.ws, this.edge, log);
    // Routed: a request through the edge reaches the workers.
    const nc = await connect({ servers: `127.0.0.1:${this.edgePorts.nats}`, user: "operator",
      pass: "operator-password", inboxPrefix: "_INBOX_operator" });
    await until("the edge's route", async () => {
      const m = await nc.request("wuhu.admin.sessions", sc.encode("{}"), { timeout: 1000 }).catch(() => null);
      return m !== null;
    });
    await nc.close();
  }

  get edgeWsUrl() {
    return `ws://127.0.0.1:${this.edgePorts.ws}`;
  }

  async stopEdge() {
    if (this.edge) {
      const done = exited(this.edge);
      this.edge.kill("SIGKILL");
      await done;
    }
  }

  async startWorker(id) {
    const worker = process.env.WUHU_WORKER;
    const log = path.join(this.dir, `${id}.log`);
    const out = fs.openSync(log, "a");
    const metricsPort = await freePort();
    const proc = spawn(worker, ["--nats", `nats://127.0.0.1:${this.natsPort}`, "--nats-user", "fleet",
      "--nats-inbox-prefix", "_INBOX_fleet", "--store", `sqlite://${this.dir}/data`,
      "--script", this.script, "--worker-id", id, "--metrics-addr", `127.0.0.1:${metricsPort}`,
      "--lease-ttl-ms", "5000", ...this.workerArgs], { stdio: ["ignore", out, out],
      env: { ...process.env, WUHU_NATS_PASSWORD: "fleet-password" } });
    fs.closeSync(out);
    this.workers.set(id, { proc, metrics: `127.0.0.1:${metricsPort}`, log });
    await until(`worker ${id} ready`, async () => {
      if (proc.exitCode !== null) {
        throw new Error(`worker ${id} exited: ${fs.readFileSync(log, "utf8")}`);
      }
      const r = await fetch(`http://127.0.0.1:${metricsPort}/readyz`).catch(() => null);
      return r && r.ok;
    });
    return this.workers.get(id);
  }

  // The console's address on a worker, logged in as `user` (without the password: the page
  // asks for it).
  consoleUrl(user, { withPass = true, edge = false, id = [...this.workers.keys()][0], more = {} } = {}) {
    const q = new URLSearchParams({ nats: edge ? this.edgeWsUrl : this.wsUrl, user, ...more });
    if (withPass) {
      q.set("pass", `${user}-password`);
    }
    return `http://${this.workers.get(id).metrics}/console/?${q}`;
  }

  kill(id) {
    const w = this.workers.get(id);
    const done = exited(w.proc);
    w.proc.kill("SIGKILL");
    this.workers.delete(id);
    return done;
  }

  async request(subject, body) {
    const m = await this.nc.request(subject, sc.encode(JSON.stringify(body)), { timeout: 10000 });
    return JSON.parse(sc.decode(m.data));
  }

  session(sid, verb, body = {}) {
    return this.request(`wuhu.session.${sid}.${verb}`, body);
  }

  async owner(sid) {
    const r = await this.request("wuhu.admin.sessions", { ids: [sid] });
    return r.sessions && r.sessions[0] ? r.sessions[0].owner : undefined;
  }

  logs() {
    return [...this.workers.entries()].map(([id, w]) => `--- ${id}\n${fs.readFileSync(w.log, "utf8")}`).join("\n");
  }

  async stop() {
    if (this.nc) {
      await this.nc.close().catch(() => {});
    }
    const exits = [];
    for (const [, w] of this.workers) {
      exits.push(exited(w.proc));
      w.proc.kill("SIGTERM");
    }
    await Promise.race([Promise.all(exits), sleep(10000)]);
    for (const [, w] of this.workers) {
      if (w.proc.exitCode === null) {
        w.proc.kill("SIGKILL");
      }
    }
    await this.stopEdge();
    const done = exited(this.nats);
    this.nats.kill("SIGTERM");
    await done;
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

// Debian's headless chromium (run.sh finds it), as root.
export function launchBrowser() {
  return puppeteer.launch({
    executablePath: process.env.WUHU_CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
}

// The text a person reads in `selector` ("" when it is not there).
export const text = (page, selector) => page.$eval(selector, (el) => el.innerText).catch(() => "");

// Waits until `selector`'s text contains `want`.
export async function sees(page, selector, want, ms = 20000) {
  let seen = "";
  try {
    await until(`${selector} to show "${want}"`, async () => (seen = await text(page, selector)).includes(want), ms);
  } catch (e) {
    throw new Error(`${e.message}; it shows: ${seen}${page.errors && page.errors.length ? `; page errors: ${page.errors}` : ""}`);
  }
}

// Closes what a test file started (either may be missing: its start failed).
export async function shutDown(browser, fleet) {
  if (browser) {
    await browser.close();
  }
  if (fleet) {
    await fleet.stop();
  }
}
