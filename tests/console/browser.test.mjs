// The console in headless Chromium (Debian's chromium, driven by puppeteer-core) against a
// real fleet (fleet.mjs: nats-server with its WebSocket listener, two workers, the scripted
// model): the fleet page lists and pages; a message sent from the page gets an answer that
// appears as it streams; a steer sent during a tool call appears where the model sees it; a
// worker killed during a streamed answer leaves the committed answer on the page exactly once;
// abort and pause work; an approval is approved from the page and the tool runs once; a user
// without permission for a verb sees the refusal; a page that lost its connection reads what it
// missed once it is back. Each test saves a screenshot (the directory
// $WUHU_CONSOLE_SHOTS) and checks the key text on the page it shows.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { Fleet, launchBrowser, shutDown, sees, sleep, text, until } from "./fleet.mjs";

const shots = process.env.WUHU_CONSOLE_SHOTS || path.join(process.cwd(), "console-shots");
fs.mkdirSync(shots, { recursive: true });

// Step 0 streams slowly and calls `sleep`; step 1 answers. Every session follows it.
const script = {
  responses: [
    { chunks: ["Let me ", "look ", "that ", "up ", "for ", "you ", "now."], chunk_delay_ms: 250,
      tool_calls: [{ name: "sleep", arguments: { ms: 2500 } }] },
    { chunks: ["It is ", "sunny ", "in Oslo."], chunk_delay_ms: 100 },
  ],
};

let fleet;
let browser;

before(async () => {
  fleet = await Fleet.start({ script });
  browser = await launchBrowser();
});

after(() => shutDown(browser, fleet));

async function open(user, hash = "#/fleet", withPass = true, edge = false) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.errors = errors;
  await page.goto(fleet.consoleUrl(user, { withPass, edge }) + hash);
  return page;
}

// Saves the page as `name`.png and checks that the page shows each of `keys`.
async function shot(page, name, keys) {
  const body = await text(page, "body");
  for (const k of keys) {
    assert.ok(body.includes(k), `the screenshot ${name} shows "${k}"; the page says:\n${body}`);
  }
  assert.equal(await page.$eval("#login", (el) => getComputedStyle(el).display), "none",
    "the login form is not shown once connected");
  const file = path.join(shots, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  assert.ok(fs.statSync(file).size > 10000, `${file} holds a picture`);
}

async function sessionPage(sid, user = "operator") {
  const page = await open(user, `#/session/${sid}`);
  await page.waitForSelector("#compose");
  await sees(page, "#status", "idle");
  return page;
}

async function send(page, content, lane = "followUp", clicks = 1) {
  await page.$eval("#compose textarea", (el, v) => (el.value = v), content);
  await page.select("#compose select[name=lane]", lane);
  await page.click("#send", { count: clicks });
}

const assistantTexts = (page) =>
  page.$$eval("#transcript li.entry.assistant:not(.streaming) > .content", (els) => els.map((e) => e.innerText));

// Waits until a committed answer (not the streaming entry, which sits in the transcript too and
// shows the same text before its commit arrives) says `want`.
async function answered(page, want, ms = 30000) {
  let seen = [];
  try {
    await until(`a committed answer "${want}"`, async () => (seen = await assistantTexts(page)).includes(want), ms);
  } catch (e) {
    throw new Error(`${e.message}; the committed answers: ${JSON.stringify(seen)}`);
  }
}

test("the fleet page lists the sessions and pages through them", async () => {
  for (let i = 0; i < 23; ++i) {
    const r = await fleet.session(`list-${String(i).padStart(2, "0")}`, "configure", { system_prompt: `session ${i}` });
    assert.equal(r.ok, true, JSON.stringify(r));
  }
  const page = await open("operator");
  await sees(page, "#sessions", "list-00");
  await sees(page, ".pager", "page 1");
  const first = await page.$$eval("#sessions tbody tr", (rows) => rows.map((r) => r.dataset.sid));
  assert.equal(first.length, 20);
  await shot(page, "fleet", ["Sessions", "list-00", "Next"]);
  await page.click("#next-page");
  await sees(page, ".pager", "page 2");
  await sees(page, "#sessions", "list-22");
  const second = await page.$$eval("#sessions tbody tr", (rows) => rows.map((r) => r.dataset.sid));
  assert.ok(second.length >= 3, second.join());
  assert.ok(!second.some((s) => first.includes(s)), "no session on both pages");
  // A filter: has work (none of these has).
  await page.select("#fleet-filters select[name=has_work]", "true");
  await page.click("#fleet-filters button");
  await sees(page, "#sessions", "No sessions on this page.");
  assert.equal((await page.$$("#sessions tbody tr[data-sid]")).length, 0);
  assert.deepEqual(page.errors, []);
  await page.close();
});

test("a message sent from the page gets an answer that appears as it streams", async () => {
  const page = await sessionPage("stream-1");
  await send(page, "What is the weather in Oslo?");
  // The streamed text grows on the page before the answer is committed.
  await sees(page, "#streaming", "Let me look");
  const partial = await text(page, "#streaming");
  assert.ok(!partial.includes("now."), `streaming, not yet whole: ${partial}`);
  await shot(page, "streaming", ["What is the weather in Oslo?", "streaming", "Let me look"]);
  await answered(page, "It is sunny in Oslo.", 30000);
  await sees(page, "#status", "idle");
  assert.deepEqual(await assistantTexts(page), ["Let me look that up for you now.", "It is sunny in Oslo."]);
  await sees(page, ".tool-call", "done");
  await shot(page, "session", ["What is the weather in Oslo?", "sleep", "It is sunny in Oslo.", "usage: 2 turns"]);
  assert.deepEqual(page.errors, []);
  await page.close();
});

test("a steer sent during a tool call appears where the model sees it", async () => {
  const page = await sessionPage("steer-1");
  await send(page, "Check the weather.", "followUp", 2); // a double click: one message
  await sees(page, ".tool-call .call-state", "running", 30000);
  await send(page, "Only Oslo, please.", "steer");
  await answered(page, "It is sunny in Oslo.", 30000);
  const order = await page.$$eval("#transcript li.entry:not(.streaming)", (els) =>
    els.map((e) => (e.classList.contains("party") ? `party:${e.querySelector(".content").innerText}`
      : e.classList.contains("assistant") ? "assistant" : e.className)));
  // After the first answer (whose call was running) and before the next: where the model
  // reads it, after the tool's result.
  assert.deepEqual(order, ["party:Check the weather.", "assistant", "party:Only Oslo, please.", "assistant"]);
  await shot(page, "steer", ["Only Oslo, please.", "steer"]);
  await page.close();
});

test("a worker killed during a streamed answer leaves the committed answer on the page once", async () => {
  const page = await sessionPage("kill-1");
  await send(page, "Tell me the weather.");
  await sees(page, "#streaming", "Let me look");
  const owner = await until("the owner", () => fleet.owner("kill-1"));
  const before = await fleet.session("kill-1", "subscribe");
  assert.ok(!before.patch.transcript.some((e) => e.type === "assistant_message"),
    "killed while the answer streams, before it is committed");
  await fleet.kill(owner);
  // The other worker takes the session over (its lease expires within 5 s), and streams the
  // message again under its epoch.
  await answered(page, "It is sunny in Oslo.", 40000);
  await sees(page, "#status", "idle");
  await sleep(500);
  const texts = await assistantTexts(page);
  assert.equal(texts.filter((t) => t === "Let me look that up for you now.").length, 1, texts.join(" | "));
  assert.equal(texts.filter((t) => t === "It is sunny in Oslo.").length, 1, texts.join(" | "));
  assert.equal(await page.$eval("#streaming", (el) => el.hidden), true, "nothing left streaming");
  await sees(page, "#transcript", "interrupted: its worker stopped");
  await shot(page, "takeover", ["interrupted: its worker stopped", "It is sunny in Oslo."]);
  await fleet.startWorker(owner);
  await page.close();
});

test("abort stops a streaming answer and pause holds the session's input until resume", async () => {
  const page = await sessionPage("abort-1");
  await send(page, "Start something long.");
  await sees(page, "#streaming", "Let me");
  await page.click("#abort");
  await sees(page, "#transcript", "aborted", 20000);
  await sees(page, "#status", "idle");
  assert.equal(await page.$eval("#streaming", (el) => el.hidden), true);

  await page.click("#pause");
  await sees(page, "#status", "paused");
  await send(page, "Are you there?");
  await sees(page, "#lanes", "Are you there?");
  await sleep(1000);
  assert.ok(!(await text(page, "#transcript")).includes("Are you there?"), "paused: not taken");
  await shot(page, "paused", ["paused", "Are you there?", "aborted"]);
  await page.click("#resume");
  await sees(page, "#transcript", "Are you there?", 20000);
  await page.close();
});

test("an approval is approved from the page and the tool runs once", async () => {
  const sid = "approve-1";
  const r = await fleet.session(sid, "configure", { approval: { tools: { sleep: "always" } } });
  assert.equal(r.ok, true, JSON.stringify(r));
  const page = await sessionPage(sid);
  await send(page, "Wait a little.");
  await sees(page, "#approvals", "Waiting for approval (1)", 30000);
  await sees(page, "#status", "awaiting_approval");
  await shot(page, "approval", ["Waiting for approval (1)", "sleep", "Approve", "Reject", "Respond"]);
  // A double click sends one decision: the button is disabled while it runs, and the verb is
  // keyed by the call.
  const approve = await page.$("#approvals button[data-verb=Approve]");
  await approve.click({ count: 2 });
  await answered(page, "It is sunny in Oslo.", 30000);
  const st = await fleet.session(sid, "subscribe");
  const started = st.patch.transcript.filter((e) => e.type === "tool_started");
  const results = st.patch.transcript.filter((e) => e.type === "tool_result");
  const decisions = st.patch.transcript.filter((e) => e.type === "approval_decided");
  assert.equal(started.length, 1, "the tool ran once");
  assert.equal(results.length, 1);
  assert.equal(decisions.length, 1);
  await sees(page, "#approvals", "Waiting for approval (0)");
  await sees(page, ".tool-call", "approved by");
  await page.close();
});

test("a user without permission for a verb sees the refusal", async () => {
  await fleet.session("viewer-1", "configure", { system_prompt: "x" });
  // The password is asked for (it is not in the address).
  const page = await open("viewer", "#/session/viewer-1", false);
  await page.waitForSelector("#login input[name=pass]", { visible: true });
  assert.equal(await page.$eval("#login input[name=user]", (el) => el.value), "viewer");
  await page.type("#login input[name=pass]", "wrong-password");
  await page.click("#login button");
  await sees(page, "#login-error", "cannot connect");
  await page.$eval("#login input[name=pass]", (el) => (el.value = ""));
  await page.type("#login input[name=pass]", "viewer-password");
  await page.click("#login button");
  await page.waitForSelector("#compose");
  await sees(page, "#status", "idle");
  await send(page, "May I?");
  await sees(page, "#banner", "permissions");
  await sees(page, "#banner", "may not do this");
  await page.click("#pause");
  await sees(page, "#banner", "Pause failed");
  const st = await fleet.session("viewer-1", "subscribe");
  assert.equal(st.patch.transcript.length, 0, "nothing was sent");
  assert.equal(st.status.paused, false);
  await shot(page, "refused", ["permissions", "may not do this"]);
  await page.close();
});

test("a page whose connection was lost reads what it missed once it is back", async () => {
  const sid = "reconnect-1";
  await fleet.startEdge();
  const page = await open("operator", `#/session/${sid}`, true, true);
  await page.waitForSelector("#compose");
  await sees(page, "#status", "idle");
  await fleet.stopEdge();
  // While the page is away, the session runs a whole turn (through the other server), and then
  // nothing more is published: only the page's own read after it reconnects can show it.
  const r = await fleet.session(sid, "enqueue", { lane: "followUp", content: "While you were away" });
  assert.equal(r.ok, true, JSON.stringify(r));
  await until("the turn to end", async () => {
    const st = await fleet.session(sid, "subscribe");
    return st.status.state === "idle" && !st.status.has_work &&
      st.patch.transcript.some((e) => e.type === "assistant_message" && e.text === "It is sunny in Oslo.");
  }, 30000);
  assert.ok(!(await text(page, "#transcript")).includes("While you were away"), "the page was away");
  await fleet.startEdge();
  await answered(page, "It is sunny in Oslo.", 30000);
  await sees(page, "#transcript", "While you were away");
  assert.deepEqual(await assistantTexts(page), ["Let me look that up for you now.", "It is sunny in Oslo."]);
  await sees(page, "#usage", "usage: 2 turns");
  await page.close();
  await fleet.stopEdge();
});

test("a session deleted and made again under its id is shown anew", async () => {
  const sid = "again-1";
  assert.equal((await fleet.session(sid, "configure", { system_prompt: "first" })).ok, true);
  const page = await sessionPage(sid);
  await send(page, "The first life.");
  await answered(page, "It is sunny in Oslo.", 30000);
  await sees(page, "#usage", "usage: 2 turns");
  assert.equal((await fleet.session(sid, "delete")).ok, true);
  await sees(page, "#status", "deleted");
  const r = await fleet.session(sid, "enqueue", { lane: "followUp", content: "The second life." });
  assert.equal(r.ok, true, JSON.stringify(r));
  await sees(page, "#transcript", "The second life.", 20000);
  await answered(page, "It is sunny in Oslo.", 30000);
  await sees(page, "#usage", "usage: 2 turns");
  const texts = await text(page, "#transcript");
  assert.ok(!texts.includes("The first life."), `only the new session: ${texts}`);
  assert.deepEqual(await assistantTexts(page), ["Let me look that up for you now.", "It is sunny in Oslo."]);
  await page.close();
});
