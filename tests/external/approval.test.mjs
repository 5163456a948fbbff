// Issue 33, approvals from outside, with the npm `nats` package only (no C++): one client asks
// a session to use a tool whose calls wait for approval; a second client, which only watches
// the session's events, sees the `approval_requested` entry and approves the call; the first
// sees the tool's result and the answer that follows it.
//
//   WUHU_TEST_NATS_URL=nats://… WUHU_PREFIX=… node approval.test.mjs   (run_approval.sh)
import { connect, StringCodec } from "nats";

const url = process.env.WUHU_TEST_NATS_URL;
const prefix = process.env.WUHU_PREFIX || "wuhu";
const sid = process.env.WUHU_SESSION || "approval-1";
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
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function request(nc, verb, body) {
  const deadline = Date.now() + 20000; // the worker may still be starting
  for (;;) {
    try {
      const m = await nc.request(subject(verb), sc.encode(JSON.stringify(body)), { timeout: 5000 });
      return JSON.parse(sc.decode(m.data));
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await sleep(200);
    }
  }
}

// The second client: it knows nothing but the session id. It watches the committed patches
// and approves each call that asks, once.
const approver = await connect({ servers: url, name: "wuhu-approver" });
const approved = [];
const watching = approver.subscribe(`${prefix}.events.${sid}.patch`);
const approving = (async () => {
  for await (const m of watching) {
    const patch = JSON.parse(sc.decode(m.data));
    for (const e of patch.transcript ?? []) {
      if (e.type !== "approval_requested" || approved.includes(e.call)) continue;
      approved.push(e.call);
      const reply = await request(approver, "approve", {
        call: e.call,
        author: { id: "ops-1", name: "Olga", kind: "human" },
      });
      check(reply.ok === true && reply.decision?.decision === "approve",
        `approve reply: ${JSON.stringify(reply)}`);
      check(reply.decision?.by?.name === "Olga", "the decision names its author");
      // Idempotent by call id.
      const again = await request(approver, "approve", { call: e.call });
      check(again.ok === true && again.duplicate === true, `approve again: ${JSON.stringify(again)}`);
    }
  }
})();
await approver.flush();

// The first client asks, and reads the session until the answer after the tool's result.
const asker = await connect({ servers: url, name: "wuhu-asker" });
const enq = await request(asker, "enqueue", {
  lane: "followUp",
  id: "ask-1",
  author: { id: "u1", name: "Ann", kind: "human" },
  content: "Echo hello, please.",
});
check(enq.ok === true, `enqueue: ${JSON.stringify(enq)}`);
let transcript = [];
let status = {};
const deadline = Date.now() + 30000;
for (;;) {
  const st = await request(asker, "subscribe", {});
  transcript = st.patch.transcript;
  status = st.status;
  const last = transcript[transcript.length - 1];
  if (last?.type === "assistant_message" && last.tool_calls.length === 0 && !status.has_work) break;
  if (Date.now() > deadline) break;
  await sleep(100);
}
const types = transcript.map((e) => e.type);
check(approved.length === 1, `one call was asked and approved (${approved})`);
check(
  JSON.stringify(types) ===
    JSON.stringify(["party_message", "assistant_message", "approval_requested", "approval_decided",
      "tool_started", "tool_result", "assistant_message"]),
  `the transcript: ${JSON.stringify(types)}`,
);
const result = transcript.find((e) => e.type === "tool_result");
check(result?.output === "hello" && result?.is_error === false, `the tool ran: ${JSON.stringify(result)}`);
check(status.state === "idle", `idle at the end: ${JSON.stringify(status)}`);
// A call that does not wait is refused with a stable code.
const refused = await request(asker, "reject", { call: approved[0] ?? "x" });
check(refused.ok === false && refused.error.code === "already_decided",
  `another decision: ${JSON.stringify(refused)}`);

watching.unsubscribe();
await approving;
await approver.close();
await asker.close();
console.log(`${checks - failures}/${checks} checks passed`);
process.exit(failures === 0 ? 0 : 1);
