// The console's client of the fleet: the NATS contract of docs/protocol.md over nats-server's
// WebSocket listener, with the rules of the C++ client (docs/client.md): an id on every
// enqueue, system and abort (so a retry or a double click is one request), retries of the
// refusals that change nothing, replies in chunks reassembled, a subscribe's pages followed,
// and the gap-free watch (cursor.js). No second API: the same subjects and permissions as any
// client.
import {WatchCursor} from './cursor.js';
import {connect, createInbox, StringCodec} from './vendor/nats.js';

const sc = StringCodec();

// A refusal from the fleet, or a failure to reach it: `code` is the protocol's error code
// (docs/protocol.md "Errors"), or no_reply, bad_reply, not_connected.
export class WuhuError extends Error {
    constructor(code, message, retryAfterMs) {
        super(message);
        this.code = code;
        this.retryAfterMs = retryAfterMs;
    }
}

// What a person can do about a refusal, in a sentence (the message says what happened).
export function advice(code) {
    switch (code) {
        case 'no_reply':
            return 'No worker answered: is the fleet running, and may this user reach it?';
        case 'permissions':
            return 'Your NATS user may not do this (its permissions refuse the subject).';
        case 'lane_full':
            return 'The session has as much queued input as it may take: wait until it takes some.';
        case 'quota_exceeded':
            return 'This tenant has as many sessions as it may: delete some first.';
        case 'rate_limited':
        case 'overloaded':
            return 'The fleet is busy: try again in a moment.';
        case 'session_not_found':
            return 'There is no such session (send a message to create it).';
        case 'invalid_settings':
        case 'invalid_arguments':
        case 'invalid_json':
        case 'invalid_content':
            return 'Check what you entered.';
        case 'already_decided':
            return 'Someone decided this call already.';
        default:
            return '';
    }
}

const TOKEN = /^[A-Za-z0-9_-]{1,64}$/;
export const isToken = (s) => typeof s === 'string' && TOKEN.test(s);

// Refusals that change nothing and that another try gets past.
const RETRYABLE = new Set(['owner_changed', 'worker_stopping', 'overloaded', 'rate_limited']);
// Verbs sent again when unanswered within the attempt timeout (idempotent by their ids).
const RESEND =
    new Set(['enqueue', 'system', 'abort', 'cancel', 'subscribe', 'approve', 'reject', 'respond']);
const WITH_ID = new Set(['enqueue', 'system', 'abort']);

// A UUIDv7, as the service makes them: the id a command is known by however often it is sent.
export function newId() {
    const b = crypto.getRandomValues(new Uint8Array(16));
    let ms = Date.now();
    for (let i = 5; i >= 0; --i) {
        b[i] = ms % 256;
        ms = Math.floor(ms / 256);
    }
    b[6] = (b[6] & 0x0f) | 0x70;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${
        h.slice(20)}`;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function decode(data) {
    try {
        return JSON.parse(sc.decode(data));
    } catch {
        throw new WuhuError('bad_reply', 'a reply that is not JSON');
    }
}

export class Fleet {
    // `servers`: the WebSocket URL of nats-server; `user`/`pass` or `token`; `inboxPrefix` (the
    // permissions' _INBOX_<user>); `prefix` the fleet's subject prefix; `tenant` (an operator's:
    // the fleet's own account naming one tenant; a tenant's own user leaves it empty).
    static async open({
        servers,
        user,
        pass,
        token,
        inboxPrefix,
        prefix = 'wuhu',
        tenant = '',
        name = 'wuhu-console'
    }) {
        if (!prefix.split('.').every(isToken)) {
            throw new WuhuError(
                'invalid_prefix',
                'the subject prefix is tokens of A-Z a-z 0-9 _ - separated by dots');
        }
        if (tenant && !isToken(tenant)) {
            throw new WuhuError('invalid_tenant', 'a tenant is 1-64 of A-Z a-z 0-9 _ -');
        }
        // A ping every 20 s: a connection that died quietly (a laptop that slept) is found
        // within a minute, not the default's few.
        const opts = {
            servers,
            name,
            maxReconnectAttempts: -1,
            reconnectTimeWait: 1000,
            pingInterval: 20000,
        };
        if (user) {
            opts.user = user;
            opts.pass = pass;
        }
        if (token) {
            opts.token = token;
        }
        if (inboxPrefix) {
            opts.inboxPrefix = inboxPrefix;
        }
        let nc;
        try {
            nc = await connect(opts);
        } catch (e) {
            throw new WuhuError('not_connected', `cannot connect to ${servers}: ${e.message || e}`);
        }
        return new Fleet(nc, prefix, tenant, inboxPrefix || '_INBOX');
    }

    constructor(nc, prefix, tenant, inboxPrefix) {
        this.nc = nc;
        this.base = tenant ? `${prefix}.${tenant}` : prefix;
        this.inboxPrefix = inboxPrefix;
        this.timeoutMs = 10000;
        this.attemptMs = 2000;
        // Called when the connection is back after a loss (events sent meanwhile are lost).
        this.reconnected = new Set();
        (async () => {
            for await (const s of nc.status()) {
                if (s.type === 'reconnect') {
                    this.reconnected.forEach((f) => f());
                }
            }
        })().catch(() => {});
    }

    close() { return this.nc.close(); }

    subject(sid, verb) {
        if (!isToken(sid)) {
            throw new WuhuError('invalid_session_id', 'a session id is 1-64 of A-Z a-z 0-9 _ -');
        }
        return `${this.base}.session.${sid}.${verb}`;
    }

    events(sid) { return `${this.base}.events.${sid}.>`; }

    // One request; its reply reassembled from chunks. Throws WuhuError.
    async once(subject, body, waitMs) {
        const inbox = createInbox(this.inboxPrefix);
        const sub = this.nc.subscribe(inbox);
        // The whole reply within waitMs, its chunks too.
        let late = false;
        const timer = setTimeout(() => {
            late = true;
            sub.unsubscribe();
        }, waitMs);
        // As nats.js does for its own requests: it then ends this subscription with the error when
        // nats-server refuses the publish (the user's permissions), rather than letting it time
        // out.
        sub.requestSubject = subject;
        const parts = [];
        let chunks = 0;
        let reply = null;
        this.nc.publish(subject, sc.encode(JSON.stringify(body)), {reply: inbox});
        try {
            for await (const m of sub) {
                if (m.headers && m.headers.hasError) {
                    throw new WuhuError('no_responders', `no worker serves ${subject}`);
                }
                const v = decode(m.data);
                if (v && v.chunk !== undefined && typeof v.part === 'string') {
                    if (v.chunk !== parts.length || !Number.isInteger(v.chunks) || v.chunks < 1) {
                        throw new WuhuError('bad_reply', 'reply chunk out of order');
                    }
                    parts.push(v.part);
                    chunks = v.chunks;
                    if (parts.length === chunks) {
                        reply = JSON.parse(parts.join(''));
                        break;
                    }
                    continue;
                }
                reply = v;
                break;
            }
        } catch (e) {
            if (e instanceof WuhuError) {
                throw e;
            }
            if (String(e.code) === 'TIMEOUT') {
                throw new WuhuError('no_reply', `no reply on ${subject} (is a worker running?)`);
            }
            if (e.code === 'PERMISSIONS_VIOLATION') {
                throw new WuhuError('permissions', `nats-server refused: ${e.message}`);
            }
            throw new WuhuError('no_reply', e.message || String(e));
        } finally {
            clearTimeout(timer);
            sub.unsubscribe();
        }
        if (!reply) {
            throw new WuhuError(
                'no_reply',
                late ? `no reply on ${subject} (is a worker running?)` : `no reply on ${subject}`);
        }
        if (reply.ok !== true) {
            const err = reply.error || {};
            throw new WuhuError(
                err.code || 'bad_reply', err.message || 'a refusal without a message',
                err.retry_after_ms);
        }
        return reply;
    }

    // A request with the C++ client's retries (docs/client.md).
    async request(subject, body, verb = '') {
        const deadline = Date.now() + this.timeoutMs;
        for (let tries = 1;; ++tries) {
            try {
                for (;;) {
                    const left = deadline - Date.now();
                    if (left <= 0) {
                        throw new WuhuError(
                            'no_reply', `no reply on ${subject} (is a worker running?)`);
                    }
                    const wait = RESEND.has(verb) ? Math.min(left, this.attemptMs) : left;
                    try {
                        return await this.once(subject, body, wait);
                    } catch (e) {
                        // Sent again only when it went unanswered (a worker took it and died);
                        // nobody serving the subject at all is answered at once.
                        if (e.code === 'no_responders') {
                            throw new WuhuError(
                                'no_reply', `no reply on ${subject}: no worker serves it`);
                        }
                        if (!(e.code === 'no_reply' && RESEND.has(verb) && wait < left)) {
                            throw e;
                        }
                    }
                }
            } catch (e) {
                const pause = Math.max(Math.min(20 * tries, 200), e.retryAfterMs || 0);
                if (!RETRYABLE.has(e.code) || Date.now() + pause >= deadline) {
                    throw e;
                }
                await sleep(pause);
            }
        }
    }

    // A session's verb. An enqueue, system or abort without an id gets one here.
    call(sid, verb, body = {}) {
        const b = {...body};
        if (WITH_ID.has(verb) && !b.id) {
            b.id = newId();
        }
        return this.request(this.subject(sid, verb), b, verb);
    }

    // A whole subscribe: its pages followed, their transcripts and facts joined.
    async subscribe(sid, since) {
        let reply = await this.call(sid, 'subscribe', since ? {since} : {});
        const whole = reply;
        while (reply.more) {
            reply = await this.call(sid, 'subscribe', {since: reply.patch.to});
            whole.patch.transcript.push(...reply.patch.transcript);
            for (const lane of ['system', 'steer', 'followUp']) {
                whole.patch.journal[lane].push(...reply.patch.journal[lane]);
            }
            whole.patch.to = reply.patch.to;
            // The registers are the last page's (each page's are those of its moment).
            for (const k of ['status', 'settings']) {
                if (reply.patch[k] !== undefined) {
                    whole.patch[k] = reply.patch[k];
                } else {
                    delete whole.patch[k];
                }
            }
            for (const k of ['status', 'settings', 'step', 'inflight']) {
                if (reply[k] !== undefined) {
                    whole[k] = reply[k];
                } else {
                    delete whole[k];
                }
            }
            whole.more = reply.more;
        }
        return whole;
    }

    // A page of the fleet view (docs/protocol.md "The fleet view").
    sessions(query) { return this.request(`${this.base}.admin.sessions`, query, 'subscribe'); }

    // Watches a session: `onPatch(patch)`, `onDelta(delta)`, `onDeleted()`, `onError(err)`.
    // Returns { stop() }. Gap-free across reconnects and owner changes: events first, then the
    // backfill; a gap asks again since the version held.
    watch(sid, handlers) {
        let cursor = new WatchCursor();
        const sub = this.nc.subscribe(this.events(sid));
        let stopped = false;
        const queue = [];
        let wake = null;
        // Back from a lost connection: what was published meanwhile never comes, so read again
        // from the version held (the cursor delivers only what was missed).
        const again = () => {
            queue.push(null);
            if (wake) {
                wake();
            }
        };
        this.reconnected.add(again);
        // A backfill, asked again until it comes (the fleet may be moving the session, or
        // away for a moment); each failure is reported. Permissions never change: they end it.
        const backfill = async (since) => {
            for (let wait = 250;; wait = Math.min(2 * wait, 5000)) {
                try {
                    return await this.subscribe(sid, since);
                } catch (e) {
                    if (stopped || e.code === 'permissions') {
                        throw e;
                    }
                    if (handlers.onError) {
                        handlers.onError(e);
                    }
                    await sleep(wait);
                }
            }
        };
        (async () => {
            for await (const m of sub) {
                queue.push(m);
                if (wake) {
                    wake();
                }
            }
        })().catch((e) => {
            // The events refused (the user's permissions): the page would never move again.
            if (!stopped && handlers.onError) {
                handlers.onError(
                    e.code === 'PERMISSIONS_VIOLATION' ?
                        new WuhuError('permissions', `nats-server refused: ${e.message}`) :
                        e);
            }
        });
        const deliver = async (d) => {
            for (;;) {
                d.patches.forEach((p) => handlers.onPatch(p));
                d.deltas.forEach((x) => handlers.onDelta(x));
                if (!d.gap || stopped) {
                    return;
                }
                d = cursor.resync(await backfill(cursor.version));
            }
        };
        const run = async () => {
            await this.nc.flush();
            await deliver(cursor.start(await backfill(undefined)));
            while (!stopped) {
                if (queue.length === 0) {
                    await new Promise((r) => (wake = r));
                    wake = null;
                    continue;
                }
                const m = queue.shift();
                if (m === null) {
                    await deliver(cursor.resync(await backfill(cursor.version)));
                    continue;
                }
                let v;
                try {
                    v = JSON.parse(sc.decode(m.data));
                } catch {
                    continue;
                }
                if (!v || typeof v !== 'object') {
                    continue;
                }
                if (m.subject.endsWith('.deleted')) {
                    if (v.type !== 'session.deleted') {
                        continue;
                    }
                    if (handlers.onDeleted) {
                        handlers.onDeleted(v);
                    }
                    // A session made again under this id starts from the zero version: the
                    // watch starts over with it.
                    cursor = new WatchCursor();
                    await deliver(cursor.start(await backfill(undefined)));
                    continue;
                }
                await deliver(m.subject.endsWith('.patch') ? cursor.patch(v) : cursor.delta(v));
            }
        };
        run().catch((e) => {
            if (!stopped && handlers.onError) {
                handlers.onError(e);
            }
        });
        return {
            stop: () => {
                stopped = true;
                this.reconnected.delete(again);
                sub.unsubscribe();
                if (wake) {
                    wake();
                }
            },
        };
    }
}
