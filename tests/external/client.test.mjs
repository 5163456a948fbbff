// The external-client test: a Wuhu worker driven by the npm `nats` package, a client this
// project did not write, using only the documented subjects and payloads (docs/protocol.md).
//
//   WUHU_TEST_NATS_URL=nats://127.0.0.1:4222 WUHU_PREFIX=wuhu node client.test.mjs
//
// It subscribes to the session's events, takes the backfill, publishes a system-lane callback,
// enqueues a follow-up, and reads the resulting patches and deltas: the versions chain without
// gaps from the backfill on, the deltas of each message are numbered 1, 2, ... without gaps,
// and the streamed text is the committed assistant text. Exit code 0 only if every check held.
import { connect, StringCodec } from "nats";

const url = process.env.WUHU_TEST_NATS_URL;
const prefix = process.env.WUHU_PREFIX || "wuhu";
const sid = process.env.WUHU_SESSION || "external-1";
if (!url) {
  console.error("WUHU_TEST_NATS_URL is not set");
  process.exit(2);
}

const sc = StringCodec();
let failures = 0;
let checks = 0;
function check(cond, what) {
  checks++;
  if (!cond) {
    failures++;
    console.error(`FAIL: ${what}`);
  }
}
const subject = (verb) => `${prefix}.session.${sid}.${verb}`;
const sameVersion = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const covered = (to, v) =>
  ["transcript", "system", "steer", "followUp"].every((k) => to[k] <= v[k]);

async function request(nc, verb, body) {
  // The worker may still be starting: retry on "no responders" / timeout for up to 20 s.
  const deadline = Date.now() + 20000;
  for (;;) {
    try {
      const m = await nc.request(subject(verb), sc.encode(JSON.stringify(body)), { timeout: 5000 });
      return JSON.parse(sc.decode(m.data));
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

const nc = await connect({ servers: url, name: "wuhu-external-test" });
const events = [];
let wake = () => {};
const sub = nc.subscribe(`${prefix}.events.${sid}.>`);
(async () => {
  for await (const m of sub) {
    events.push({ subject: m.subject, body: JSON.parse(sc.decode(m.data)) });
    wake();
  }
})();
await nc.flush();

// Backfill after the subscription: nothing can fall between the two.
const backfill = await request(nc, "subscribe", {});
check(backfill.ok === true, `subscribe ok: ${JSON.stringify(backfill).slice(0, 200)}`);
let version = backfill.patch.to;

const sys = await request(nc, "system", {
  id: "ext-cb-1",
  source: "asyncBashCallback",
  content: "build 42 finished: 0 failures",
});
check(sys.ok === true && sys.id === "ext-cb-1", `system reply: ${JSON.stringify(sys)}`);
const enq = await request(nc, "enqueue", {
  lane: "followUp",
  id: "ext-f-1",
  author: { id: "ext", name: "External", kind: "bot" },
  content: "Summarize the build result.",
});
check(enq.ok === true && enq.id === "ext-f-1", `enqueue reply: ${JSON.stringify(enq)}`);
// A retried id gets the same reply.
const again = await request(nc, "enqueue", {
  lane: "followUp",
  id: "ext-f-1",
  author: { id: "ext", name: "External", kind: "bot" },
  content: "Summarize the build result.",
});
check(JSON.stringify(again) === JSON.stringify(enq), "the retried enqueue gets the same reply");
// Bad input gets a stable code.
const bad = await request(nc, "enqueue", { lane: "sideways", content: "x" });
check(bad.ok === false && bad.error.code === "invalid_lane", `bad lane: ${JSON.stringify(bad)}`);

// Read events until the assistant has answered the follow-up and the session is idle.
const deadline = Date.now() + 30000;
const transcript = [];
const streamed = new Map(); // step -> text
const lastSeq = new Map(); // step -> last seq
let patches = 0;
let idle = false;
let answered = false;
let next = 0;
while (!(answered && idle)) {
  if (next === events.length) {
    if (Date.now() > deadline) break;
    await new Promise((r) => {
      wake = r;
      setTimeout(r, 250);
    });
    continue;
  }
  const { subject: subj, body } = events[next++];
  if (subj.endsWith(".patch")) {
    if (covered(body.to, version) && !sameVersion(body.from, body.to)) continue; // in the backfill
    check(sameVersion(body.from, version), `patch chains: from ${JSON.stringify(body.from)} after ${JSON.stringify(version)}`);
    version = body.to;
    patches++;
    for (const e of body.transcript) {
      transcript.push(e);
      if (e.type === "assistant_message" && transcript.some((x) => x.type === "party_message")) {
        answered = true;
      }
    }
    if (body.status) idle = body.status.has_work === false;
  } else if (body.type === "message.start") {
    streamed.set(body.step, "");
    lastSeq.set(body.step, 0);
  } else if (body.type === "text.delta" || body.type === "tool_call.delta") {
    const prev = lastSeq.get(body.step);
    check(prev !== undefined, `delta of step ${body.step} after its message.start`);
    check(body.seq === (prev ?? 0) + 1, `delta seq ${body.seq} follows ${prev}`);
    lastSeq.set(body.step, body.seq);
    if (body.type === "text.delta") streamed.set(body.step, (streamed.get(body.step) ?? "") + body.text);
  }
}

check(answered && idle, "the follow-up was answered and the session went idle within 30 s");
check(patches >= 3, `several chained patches arrived (${patches})`);
const types = transcript.map((e) => e.type);
check(types.includes("system_message"), `the callback is in the transcript: ${types}`);
check(types.includes("party_message"), `the follow-up is in the transcript: ${types}`);
const assistants = transcript.filter((e) => e.type === "assistant_message");
check(assistants.length >= 1, "an assistant message was committed");
const texts = [...streamed.values()];
for (const a of assistants) {
  check(texts.includes(a.text), `streamed text equals the committed text "${a.text}"`);
}

// The backfill since the first version has exactly what the patches carried.
const since = await request(nc, "subscribe", { since: backfill.patch.to });
check(sameVersion(since.patch.to, version), "subscribe since the first version ends at the last patch");
check(since.patch.transcript.length === transcript.length, "and holds the same transcript entries");

await sub.unsubscribe();
await nc.close();
console.log(`external client: ${checks} checks, ${failures} failed, ${patches} patches, ${transcript.length} entries`);
process.exit(failures === 0 ? 0 : 1);
