// One session as the console shows it, folded from what the watch delivers (cursor.js): the
// transcript (append-only, by entry id), each lane's pending items and the system lane's
// scheduled callbacks (from the journals' facts), the status and settings registers, and the
// message streaming now. Pure: no DOM, tested in node (tests/console/).

export const LANES = ['system', 'steer', 'followUp'];

export class SessionModel {
    constructor() {
        this.entries = [];  // in order
        this.ids = new Set();
        this.items = new Map();   // pending items by lane + id
        this.timers = new Map();  // scheduled callbacks by id
        this.status = null;
        this.settings = null;
        this.streaming = null;  // {step, epoch, text, calls: [{id, name, arguments}]}
        this.deleted = false;
        this.answers = 0;  // assistant messages: the step of the next one
    }

    // Applies a delivered patch; returns the entries it added.
    applyPatch(p) {
        const added = [];
        for (const e of p.transcript || []) {
            if (e && Number.isSafeInteger(e.id) && !this.ids.has(e.id)) {
                this.ids.add(e.id);
                this.entries.push(e);
                added.push(e);
            }
        }
        const journal = p.journal || {};
        for (const lane of LANES) {
            for (const f of journal[lane] || []) {
                this.applyFact(lane, f);
            }
        }
        if (p.status) {
            this.status = p.status;
        }
        if (p.settings) {
            this.settings = p.settings;
        }
        this.answers += added.filter((e) => e.type === 'assistant_message').length;
        if (this.streaming && this.answers > this.streaming.step) {
            this.streaming = null;  // its answer is committed: the entry is the truth
        }
        return added;
    }

    applyFact(lane, f) {
        if (!f || typeof f !== 'object') {
            return;
        }
        const key = (id) => `${lane}/${id}`;
        switch (f.fact) {
            case 'enqueued':
                if (f.item && typeof f.item.id === 'string') {
                    this.items.set(key(f.item.id), {lane, ...f.item});
                }
                break;
            case 'canceled':
            case 'materialized':
                this.items.delete(key(f.id));
                break;
            case 'scheduled':
                if (f.timer && typeof f.timer.id === 'string') {
                    this.timers.set(f.timer.id, f.timer);
                }
                break;
            case 'fired':
            case 'unscheduled':
                this.timers.delete(f.id);
                break;
        }
    }

    // Applies a delivered stream event.
    applyDelta(d) {
        switch (d.type) {
            case 'message.start':
                this.streaming = {step: d.step, epoch: d.epoch, text: '', calls: []};
                break;
            case 'message.discard':
                this.streaming = null;
                break;
            case 'text.delta':
                if (this.streaming) {
                    this.streaming.text += typeof d.text === 'string' ? d.text : '';
                }
                break;
            case 'tool_call.delta':
                if (this.streaming) {
                    this.streaming.calls.push({id: d.id, name: d.name, arguments: d.arguments});
                }
                break;
        }
    }

    pending(lane) { return [...this.items.values()].filter((i) => i.lane === lane); }

    // The calls that wait for a person's decision: asked, with neither a decision nor a result.
    awaitingApproval() {
        const decided = new Set();
        for (const e of this.entries) {
            if (e.type === 'approval_decided' || e.type === 'tool_result') {
                decided.add(e.call);
            }
        }
        return this.entries.filter((e) => e.type === 'approval_requested' && !decided.has(e.call));
    }
}

// Nano-dollars as dollars ($0.00318).
export function dollars(nano) {
    if (!Number.isFinite(nano) || nano <= 0) {
        return '$0';
    }
    const s = (nano / 1e9).toFixed(9).replace(/0+$/, '').replace(/\.$/, '');
    return `$${s}`;
}

// Unix milliseconds as a UTC time a person reads.
export function when(ms) {
    if (!Number.isFinite(ms) || ms <= 0) {
        return 'never';
    }
    return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}
