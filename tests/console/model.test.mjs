// The console's pure modules in node: the gap-free watch's cursor (console/www/cursor.js, the
// rules of docs/protocol.md "Events", as tests/client/watch_cursor_test.cpp checks the C++
// one) and the session model the page is drawn from (console/www/model.js).
import { test } from "node:test";
import assert from "node:assert/strict";
import { WatchCursor, covered } from "../../console/www/cursor.js";
import { SessionModel, dollars } from "../../console/www/model.js";

const v = (transcript, system = 0, steer = 0, followUp = 0) => ({ transcript, system, steer, followUp });
const patch = (from, to, transcript = [], extra = {}) =>
  ({ from, to, transcript, journal: { system: [], steer: [], followUp: [] }, ...extra });
const answer = (id, text) => ({ id, at: 1, type: "assistant_message", text, tool_calls: [] });
const reply = (to, extra = {}) => ({ ok: true, patch: patch(v(0), to), status: { state: "idle", epoch: 1, seq: 10 },
  settings: {}, step: 0, ...extra });

test("patches at or below the backfill are dropped, the next one delivered, a skipped one is a gap", () => {
  const c = new WatchCursor();
  const first = c.start(reply(v(3)));
  assert.equal(first.patches.length, 1);
  assert.equal(c.patch(patch(v(2), v(3))).patches.length, 0, "held already");
  assert.equal(c.patch(patch(v(2), v(3))).gap, false);
  const next = c.patch(patch(v(3), v(4), [{ id: 4, type: "party_message" }]));
  assert.equal(next.patches.length, 1);
  assert.equal(c.patch(patch(v(5), v(6))).gap, true, "4 to 5 was missed");
  // The resync since 4 delivers only what was missed.
  const again = c.resync(reply(v(6), { patch: patch(v(4), v(6), [{ id: 5 }, { id: 6 }]) }));
  assert.equal(again.patches.length, 1);
  assert.deepEqual(c.version, v(6));
  assert.ok(covered(v(5), v(6)) && !covered(v(7), v(6)));
});

test("a status older than the one held is dropped", () => {
  const c = new WatchCursor();
  c.start(reply(v(1), { status: { state: "idle", epoch: 2, seq: 50 } }));
  const old = patch(v(1), v(1), [], { status: { state: "inferring", epoch: 2, seq: 40 } });
  assert.equal(c.patch(old).patches.length, 0);
  const newer = patch(v(1), v(1), [], { status: { state: "inferring", epoch: 2, seq: 60 } });
  assert.equal(c.patch(newer).patches.length, 1);
  const otherOwner = patch(v(1), v(1), [], { status: { state: "idle", epoch: 3, seq: 1 } });
  assert.equal(c.patch(otherOwner).patches.length, 1, "a later owner's status is newer");
});

test("the inflight text is delivered once, deltas it held are dropped, a skipped seq is a gap", () => {
  const c = new WatchCursor();
  const d = c.start(reply(v(1), { step: 0, inflight: { step: 0, epoch: 1, text: "Hel", seq: 2, tool_calls: [] } }));
  assert.deepEqual(d.deltas.map((x) => x.type), ["message.start", "text.delta"]);
  assert.equal(d.deltas[1].text, "Hel");
  assert.equal(c.delta({ type: "text.delta", step: 0, epoch: 1, seq: 2, text: "l" }).deltas.length, 0);
  assert.equal(c.delta({ type: "text.delta", step: 0, epoch: 1, seq: 3, text: "lo" }).deltas[0].text, "lo");
  assert.equal(c.delta({ type: "text.delta", step: 0, epoch: 1, seq: 5, text: "!" }).gap, true);
});

test("a new owner restarts the message, an old owner's late deltas are dropped, an interruption ends it", () => {
  const c = new WatchCursor();
  c.start(reply(v(1)));
  c.delta({ type: "message.start", step: 0, epoch: 1 });
  c.delta({ type: "text.delta", step: 0, epoch: 1, seq: 1, text: "Let me" });
  // The owner died; the next one commits an interruption, then streams the step again.
  const cut = c.patch(patch(v(1), v(2), [{ id: 2, type: "interruption", kind: "owner_lost" }]));
  assert.deepEqual(cut.deltas.map((x) => x.type), ["message.discard"]);
  const restart = c.delta({ type: "message.start", step: 0, epoch: 2 });
  assert.deepEqual(restart.deltas.map((x) => x.type), ["message.start"]);
  assert.equal(c.delta({ type: "text.delta", step: 0, epoch: 1, seq: 2, text: " look" }).deltas.length, 0,
    "the old owner's last delta");
  assert.equal(c.delta({ type: "text.delta", step: 0, epoch: 2, seq: 1, text: "Let me" }).deltas.length, 1);
  // The committed answer ends the message: later events of that step are already held.
  c.patch(patch(v(2), v(3), [answer(3, "Let me look.")]));
  assert.equal(c.delta({ type: "text.delta", step: 0, epoch: 2, seq: 2, text: " look." }).deltas.length, 0);
});

test("the model folds entries once, the lanes' pending items and timers, and what waits for approval", () => {
  const m = new SessionModel();
  const enq = (id, content) => ({ seq: 1, at: 1, fact: "enqueued", item: { id, lane: "followUp", content } });
  m.applyPatch({ ...patch(v(0), v(1, 0, 0, 2), [{ id: 1, type: "party_message", content: "hi" }]),
    journal: { system: [{ fact: "scheduled", timer: { id: "t1", due: 5, content: "later" } }], steer: [],
      followUp: [enq("a", "first"), enq("b", "second"), { fact: "materialized", id: "a", entry: 1 }] } });
  m.applyPatch(patch(v(1), v(1), [{ id: 1, type: "party_message", content: "hi" }]));
  assert.equal(m.entries.length, 1, "an entry delivered twice is held once");
  assert.deepEqual(m.pending("followUp").map((i) => i.content), ["second"]);
  assert.deepEqual([...m.timers.keys()], ["t1"]);
  m.applyDelta({ type: "message.start", step: 0, epoch: 1 });
  m.applyDelta({ type: "text.delta", step: 0, epoch: 1, seq: 1, text: "Wor" });
  assert.equal(m.streaming.text, "Wor");
  m.applyPatch(patch(v(1), v(3), [
    { ...answer(2, "Working."), tool_calls: [{ id: "c1", name: "deploy", arguments: "{}" }] },
    { id: 3, type: "approval_requested", call: "c1", tool: "deploy", arguments: "{}" }]));
  assert.equal(m.streaming, null, "the committed answer replaces the streamed text");
  assert.deepEqual(m.awaitingApproval().map((a) => a.call), ["c1"]);
  m.applyPatch(patch(v(3), v(4), [{ id: 4, type: "approval_decided", call: "c1", decision: "approve" }]));
  assert.deepEqual(m.awaitingApproval(), []);
  assert.equal(dollars(3180000), "$0.00318");
  assert.equal(dollars(0), "$0");
});

test("the vendored NATS client is the pinned npm package's, byte for byte, with its licence", async () => {
  const fs = await import("node:fs");
  const here = new URL(".", import.meta.url).pathname;
  const pinned = JSON.parse(fs.readFileSync(`${here}package.json`, "utf8")).dependencies["nats.ws"];
  const installed = JSON.parse(fs.readFileSync(`${here}node_modules/nats.ws/package.json`, "utf8")).version;
  assert.equal(installed, pinned);
  const same = (a, b) => fs.readFileSync(a).equals(fs.readFileSync(b));
  assert.ok(same(`${here}node_modules/nats.ws/esm/nats.js`, `${here}../../console/www/vendor/nats.js`),
    "console/www/vendor/nats.js is nats.ws's esm/nats.js (console/README.md says how to update it)");
  assert.ok(same(`${here}node_modules/nats.ws/LICENSE`, `${here}../../console/www/vendor/nats.ws.LICENSE`));
});
