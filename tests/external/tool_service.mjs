// A tool service written with the npm `nats` package (a client this project did not write),
// as docs/tools.md describes one: it serves two tools of a Wuhu worker.
//
//   get_weather  answers at once: {"output": "..."}
//   start_build  an asynchronous tool: answers "started build-7" at once, then sends the
//                build's outcome to the session's system lane (<prefix>.session.<sid>.system)
//
//   WUHU_TEST_NATS_URL=nats://127.0.0.1:4222 node tool_service.mjs <subject prefix>
//
// It prints "ready" once it serves, then one JSON line per call it received (the tool, the
// headers, the arguments) and per callback it sent (its reply), for the test to check.
import { connect, StringCodec } from "nats";

const url = process.env.WUHU_TEST_NATS_URL;
const prefix = process.argv[2] || "wuhu";
if (!url) {
  console.error("WUHU_TEST_NATS_URL is not set");
  process.exit(2);
}
const sc = StringCodec();
const nc = await connect({ servers: url, name: "wuhu-test-tool-service" });
const say = (o) => console.log(JSON.stringify(o));

function received(tool, m) {
  const h = (k) => (m.headers ? m.headers.get(k) : "");
  const call = {
    tool,
    session: h("Wuhu-Session"),
    call: h("Wuhu-Tool-Call"),
    deadline: h("Wuhu-Deadline"),
    attempt: h("Wuhu-Attempt"),
    arguments: JSON.parse(sc.decode(m.data)),
  };
  say(call);
  return call;
}

const answer = (m, output, isError = false) =>
  m.respond(sc.encode(JSON.stringify({ output, is_error: isError })));

async function serve(tool, handle) {
  const sub = nc.subscribe(`${prefix}.tools.${tool}`);
  (async () => {
    for await (const m of sub) {
      handle(received(tool, m), m);
    }
  })();
}

await serve("get_weather", (call, m) => {
  answer(m, `Sunny, 21 °C in ${call.arguments.city}`);
});

await serve("start_build", (call, m) => {
  answer(m, "started build-7; its outcome comes later");
  // Later, the outcome goes to the session's system lane, keyed by the call (idempotent).
  setTimeout(async () => {
    const body = {
      id: `cb-${call.call}`,
      source: "asyncTaskNotification",
      content: "build-7 finished: all 42 tests passed",
    };
    for (let i = 0; i < 50; i++) {
      try {
        const r = await nc.request(`${prefix}.session.${call.session}.system`,
                                   sc.encode(JSON.stringify(body)), { timeout: 5000 });
        say({ callback: JSON.parse(sc.decode(r.data)) });
        return;
      } catch (e) {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    say({ callback: "failed" });
  }, 300);
});

await nc.flush();
say("ready");
process.on("SIGTERM", async () => {
  await nc.drain();
  process.exit(0);
});
