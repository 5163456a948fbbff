// The console's client of the fleet (console/www/wuhu.js) in node, against a fake connection
// that answers as the fleet would: replies in chunks reassembled (and a reply whose chunks stop
// coming is no_reply, not a hang), a subject nobody serves answered at once and not sent again,
// an unanswered request sent again with the same id, a refusal that changes nothing retried,
// and a subscribe's pages joined with the last page's registers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Fleet } from "../../console/www/wuhu.js";

const te = new TextEncoder();
const td = new TextDecoder();

// A connection whose `answer(subject, body, n)` gives, for the n-th request, the messages the
// requester receives (objects sent as JSON; "503": nats-server's no-responders status; none:
// silence).
class FakeConnection {
  constructor(answer) {
    this.answer = answer;
    this.sent = [];
    this.subs = new Map();
  }

  subscribe(subject) {
    const queue = [];
    let wake = null;
    let closed = false;
    const sub = {
      push(m) {
        queue.push(m);
        if (wake) {
          wake();
        }
      },
      unsubscribe() {
        closed = true;
        if (wake) {
          wake();
        }
      },
      async *[Symbol.asyncIterator]() {
        for (;;) {
          if (queue.length) {
            yield queue.shift();
          } else if (closed) {
            return;
          } else {
            await new Promise((r) => (wake = r));
            wake = null;
          }
        }
      },
    };
    this.subs.set(subject, sub);
    return sub;
  }

  publish(subject, data, { reply }) {
    const body = JSON.parse(td.decode(data));
    this.sent.push({ subject, body });
    const messages = this.answer(subject, body, this.sent.length) || [];
    setTimeout(() => {
      for (const m of messages) {
        const sub = this.subs.get(reply);
        if (m === "503") {
          sub.push({ data: new Uint8Array(0), headers: { hasError: true, code: 503 } });
        } else {
          sub.push({ data: te.encode(typeof m === "string" ? m : JSON.stringify(m)) });
        }
      }
    }, 1);
  }

  status() {
    return { async *[Symbol.asyncIterator]() {} };
  }
}

function fleet(answer) {
  const nc = new FakeConnection(answer);
  const f = new Fleet(nc, "wuhu", "", "_INBOX_test");
  f.timeoutMs = 1500;
  f.attemptMs = 300;
  return { f, nc };
}

test("a reply in chunks is reassembled, and one whose chunks stop coming is no_reply", async () => {
  const text = JSON.stringify({ ok: true, patch: { transcript: [] }, big: "x".repeat(50) });
  const parts = [text.slice(0, 20), text.slice(20, 40), text.slice(40)];
  const { f } = fleet(() => parts.map((part, chunk) => ({ ok: true, chunk, chunks: 3, part })));
  const r = await f.call("s1", "configure", {});
  assert.equal(r.big.length, 50);

  const cut = fleet(() => [{ ok: true, chunk: 0, chunks: 3, part: parts[0] }]);
  await assert.rejects(cut.f.call("s1", "configure", {}), (e) => e.code === "no_reply");
});

test("a subject nobody serves is answered at once, not sent again", async () => {
  const { f, nc } = fleet(() => ["503"]);
  const began = Date.now();
  await assert.rejects(f.call("s1", "enqueue", { lane: "followUp", content: "hi" }),
    (e) => e.code === "no_reply" && /no worker serves it/.test(e.message));
  assert.equal(nc.sent.length, 1);
  assert.ok(Date.now() - began < 250);
});

test("an unanswered enqueue is sent again with the same id; a refusal that changes nothing is retried", async () => {
  const { f, nc } = fleet((subject, body, n) => (n === 1 ? [] : n === 2
    ? [{ ok: false, error: { code: "owner_changed", message: "moved" } }] : [{ ok: true, id: body.id }]));
  const r = await f.call("s1", "enqueue", { lane: "followUp", content: "hi" });
  assert.equal(nc.sent.length, 3);
  const ids = new Set(nc.sent.map((s) => s.body.id));
  assert.equal(ids.size, 1, "one id for every copy");
  assert.equal(r.id, [...ids][0]);

  // configure is never sent again when unanswered (a late copy could undo a later one).
  const once = fleet(() => []);
  await assert.rejects(once.f.call("s1", "configure", { model: "m" }), (e) => e.code === "no_reply");
  assert.equal(once.nc.sent.length, 1);

  // lane_full is the person's to act on: returned at once.
  const full = fleet(() => [{ ok: false, error: { code: "lane_full", message: "full", retry_after_ms: 100 } }]);
  await assert.rejects(full.f.call("s1", "enqueue", { lane: "steer", content: "x" }), (e) => e.code === "lane_full");
  assert.equal(full.nc.sent.length, 1);
});

test("a subscribe's pages are joined, with the last page's registers", async () => {
  const v = (t) => ({ transcript: t, system: 0, steer: 0, followUp: 0 });
  const journal = () => ({ system: [], steer: [], followUp: [] });
  const { f, nc } = fleet((subject, body) => {
    if (!body.since) {
      return [{ ok: true, more: true, step: 1,
        patch: { from: v(0), to: v(2), transcript: [{ id: 1 }, { id: 2 }], journal: journal(),
          status: { state: "inferring", epoch: 1, seq: 5 } },
        status: { state: "inferring", epoch: 1, seq: 5 }, settings: { model: "a" } }];
    }
    return [{ ok: true, step: 2,
      patch: { from: v(2), to: v(3), transcript: [{ id: 3 }], journal: journal(),
        status: { state: "idle", epoch: 1, seq: 9 } },
      status: { state: "idle", epoch: 1, seq: 9 }, settings: { model: "b" } }];
  });
  const r = await f.subscribe("s1");
  assert.deepEqual(nc.sent.map((s) => s.body.since?.transcript ?? null), [null, 2]);
  assert.deepEqual(r.patch.transcript.map((e) => e.id), [1, 2, 3]);
  assert.deepEqual(r.patch.to, v(3));
  assert.equal(r.patch.status.state, "idle");
  assert.equal(r.status.seq, 9);
  assert.equal(r.settings.model, "b");
  assert.equal(r.step, 2);
  assert.equal(r.more, undefined);
});
