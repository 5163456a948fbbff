// The console of a tenant (issue 35): against a fleet with tenancy behind
// docs/examples/nats-tenants.conf (each tenant an account that imports the fleet's subjects
// under the plain layout), a tenant's application user sees its own sessions only, through the
// plain subjects, and its commands reach its own session and not another tenant's of the same
// id.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { Fleet, launchBrowser, shutDown, sees, text, until } from "./fleet.mjs";

const shots = process.env.WUHU_CONSOLE_SHOTS || path.join(process.cwd(), "console-shots");
fs.mkdirSync(shots, { recursive: true });

let fleet;
let browser;

before(async () => {
  fleet = await Fleet.start({
    script: { responses: [{ chunks: ["Hello ", "from ", "acme's ", "agent."], chunk_delay_ms: 100 }] },
    workers: ["t1"],
    tenants: true,
  });
  browser = await launchBrowser();
});

after(() => shutDown(browser, fleet));

test("a tenant's user sees and commands its own sessions only, through the plain layout", async () => {
  // The operator (the fleet's account) makes s1 for both tenants, and a second one for globex.
  for (const [tenant, sid, prompt] of [["acme", "s1", "acme's"], ["globex", "s1", "globex's"],
    ["globex", "globex-only", "x"]]) {
    const r = await fleet.request(`wuhu.${tenant}.session.${sid}.configure`, { system_prompt: prompt });
    assert.equal(r.ok, true, JSON.stringify(r));
  }
  const r = await fleet.request("wuhu.globex.session.s1.enqueue", { lane: "followUp", content: "globex's secret" });
  assert.equal(r.ok, true, JSON.stringify(r));

  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  // The tenant's application reads its replies under `_INBOX` (the file's permissions).
  await page.goto(fleet.consoleUrl("acme-app", { more: { inbox: "_INBOX" } }));
  await sees(page, "#sessions", "s1");
  const rows = await page.$$eval("#sessions tbody tr", (trs) => trs.map((tr) => tr.dataset.sid));
  assert.deepEqual(rows, ["s1"], "acme's sessions only");

  await page.click("#sessions a");
  await page.waitForSelector("#compose");
  await until("acme's settings", async () =>
    (await page.$eval("#configure textarea", (el) => el.value).catch(() => "")) === "acme's");
  await page.$eval("#compose textarea", (el) => (el.value = "Hi from acme"));
  await page.click("#send");
  await sees(page, "#transcript", "Hello from acme's agent.", 30000);
  const shown = await text(page, "#transcript");
  assert.ok(!shown.includes("globex's secret"), shown);
  await page.screenshot({ path: path.join(shots, "tenant.png"), fullPage: true });

  const acme = await fleet.request("wuhu.acme.session.s1.subscribe", {});
  const globex = await fleet.request("wuhu.globex.session.s1.subscribe", {});
  const parties = (st) => st.patch.transcript.filter((e) => e.type === "party_message").map((e) => e.content);
  assert.deepEqual(parties(acme), ["Hi from acme"]);
  assert.deepEqual(parties(globex), ["globex's secret"]);
  await page.close();
});
