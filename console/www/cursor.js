// The gap-free watch's decisions, without NATS: the rules of docs/protocol.md "Events", as the
// C++ client's watch_cursor (client/watch.cpp) keeps them. A watcher subscribes to the
// session's events first, then asks `subscribe`; the cursor then drops what the reply already
// held, finds gaps (a patch whose `from` is not its version, a delta whose `seq` skips), and
// after a resync delivers only what was missed. Pure: tested in node (tests/console/).

const LANES = ['transcript', 'system', 'steer', 'followUp'];

const count = (o, k) => (o && Number.isSafeInteger(o[k]) && o[k] >= 0 ? o[k] : 0);

export function sameVersion(a, b) { return LANES.every((k) => count(a, k) === count(b, k)); }

// Whether version `to` is at or below `version` in every lane.
export function covered(to, version) {
    return LANES.every((k) => count(to, k) <= count(version, k));
}

const entries = (patch) => (Array.isArray(patch.transcript) ? patch.transcript : []);
const interrupts = (patch) => entries(patch).some((e) => e && e.type === 'interruption');
const answers = (patch) => entries(patch).filter((e) => e && e.type === 'assistant_message').length;

// The (epoch, seq) that orders a status, or null.
function statusRev(holder) {
    const st = holder.status;
    if (!st || typeof st !== 'object' || !('seq' in st)) {
        return null;
    }
    return [count(st, 'epoch'), count(st, 'seq')];
}

const newer = (a, b) => b === null || a[0] > b[0] || (a[0] === b[0] && a[1] > b[1]);

function discard(step, epoch) { return {type: 'message.discard', step, epoch}; }

// A reply's backfill patch, with the reply's registers.
function backfill(reply) {
    const p = {...reply.patch};
    for (const k of ['status', 'settings']) {
        if (reply[k] !== undefined && p[k] === undefined) {
            p[k] = reply[k];
        }
    }
    return p;
}

export class WatchCursor {
    constructor() {
        this.version = null;
        this.nextStep = 0;  // assistant messages delivered
        this.streaming = false;
        this.step = 0;
        this.epoch = 0;
        this.seq = 0;
        this.textDelivered = 0;
        this.callsDelivered = 0;
        this.statusRev = null;
    }

    noteStatus(holder) {
        const rev = statusRev(holder);
        if (rev && newer(rev, this.statusRev)) {
            this.statusRev = rev;
        }
    }

    takePatch(p, out) {
        this.version = p.to;
        this.nextStep += answers(p);
        if (this.streaming && this.step < this.nextStep) {
            this.streaming = false;  // its assistant entry is committed: the patch is its end
        } else if (this.streaming && interrupts(p)) {
            out.deltas.push(discard(this.step, this.epoch));
            this.streaming = false;
        }
        out.patches.push(p);
    }

    begin(step, epoch, out) {
        if (this.streaming) {
            out.deltas.push(discard(this.step, this.epoch));
        }
        Object.assign(
            this, {streaming: true, step, epoch, seq: 0, textDelivered: 0, callsDelivered: 0});
        out.deltas.push({type: 'message.start', step, epoch});
    }

    takeInflight(reply, out) {
        const i = reply.inflight;
        if (!i || typeof i !== 'object') {
            if (this.streaming) {
                out.deltas.push(discard(this.step, this.epoch));
                this.streaming = false;
            }
            return;
        }
        const step = count(i, 'step');
        const epoch = count(i, 'epoch');
        const text = typeof i.text === 'string' ? i.text : '';
        if (!this.streaming || step !== this.step || epoch !== this.epoch) {
            this.begin(step, epoch, out);
        }
        this.seq = count(i, 'seq');
        if (text.length > this.textDelivered) {
            out.deltas.push({
                type: 'text.delta',
                step,
                epoch,
                seq: this.seq,
                text: text.slice(this.textDelivered)
            });
            this.textDelivered = text.length;
        }
        const calls = Array.isArray(i.tool_calls) ? i.tool_calls : [];
        for (; this.callsDelivered < calls.length; ++this.callsDelivered) {
            const c = calls[this.callsDelivered];
            if (c && typeof c === 'object') {
                out.deltas.push({
                    type: 'tool_call.delta',
                    step,
                    epoch,
                    seq: this.seq,
                    id: c.id,
                    name: c.name,
                    arguments: c.arguments
                });
            }
        }
    }

    // The first subscribe reply (its pages joined).
    start(reply) {
        const out = {patches: [], deltas: [], gap: false};
        this.noteStatus(reply);
        out.patches.push(backfill(reply));
        this.version = reply.patch.to;
        this.nextStep = count(reply, 'step');
        this.takeInflight(reply, out);
        return out;
    }

    // A subscribe reply asked since this.version after a gap.
    resync(reply) {
        const out = {patches: [], deltas: [], gap: false};
        this.noteStatus(reply);
        const p = backfill(reply);
        if (sameVersion(p.from, this.version)) {
            this.takePatch(p, out);
        } else {
            out.patches.push(p);  // an older since than asked: taken whole
            this.version = p.to;
        }
        this.nextStep = count(reply, 'step');
        this.takeInflight(reply, out);
        return out;
    }

    patch(p) {
        const out = {patches: [], deltas: [], gap: false};
        if (!p || typeof p.from !== 'object' || typeof p.to !== 'object' ||
            !Array.isArray(p.transcript)) {
            return out;  // not a patch of the contract
        }
        if (sameVersion(p.from, this.version)) {
            const rev = statusRev(p);
            if (rev && !newer(rev, this.statusRev)) {
                if (sameVersion(p.from, p.to)) {
                    return out;  // an old status and nothing else
                }
                const rest = {...p};
                delete rest.status;
                this.takePatch(rest, out);
                return out;
            }
            this.noteStatus(p);
            this.takePatch(p, out);
        } else if (!covered(p.to, this.version)) {
            out.gap = true;
        }
        return out;
    }

    delta(d) {
        const out = {patches: [], deltas: [], gap: false};
        if (!d || typeof d !== 'object') {
            return out;
        }
        const step = count(d, 'step');
        const epoch = count(d, 'epoch');
        if (step < this.nextStep) {
            return out;  // already committed in what was delivered
        }
        const thisMessage = this.streaming && step === this.step;
        if (thisMessage && epoch < this.epoch) {
            return out;  // an older owner's last events
        }
        if (d.type === 'message.start') {
            if (!(thisMessage && epoch === this.epoch)) {
                this.begin(step, epoch, out);
            }
            return out;
        }
        if (d.type === 'message.discard') {
            if (thisMessage && epoch === this.epoch) {
                this.streaming = false;
                out.deltas.push(d);
            }
            return out;
        }
        if (!thisMessage || epoch !== this.epoch) {
            out.gap = true;  // a delta of a message whose start was missed
            return out;
        }
        const seq = count(d, 'seq');
        if (seq <= this.seq) {
            return out;
        }
        if (seq !== this.seq + 1) {
            out.gap = true;
            return out;
        }
        this.seq = seq;
        if (d.type === 'text.delta') {
            this.textDelivered += typeof d.text === 'string' ? d.text.length : 0;
        } else if (d.type === 'tool_call.delta') {
            ++this.callsDelivered;
        }
        out.deltas.push(d);
        return out;
    }
}
