// A session's page: its transcript as a person reads it (streamed text as it arrives, tool
// calls with their results, interruptions, compaction boundaries, diagnostics collapsed),
// gap-free (wuhu.js watch); its lanes' pending items with cancel; send, steer, abort, pause,
// resume, configure; the calls that wait for approval with approve, edit and approve,
// reject, respond; usage and budget.
import {dollars, LANES, SessionModel, when} from './model.js';
import {act, clear, h, showError} from './ui.js';
import {newId} from './wuhu.js';

const DECIDED = {
    approve: 'approved',
    reject: 'rejected',
    respond: 'responded to'
};

function author(a) {
    if (!a || a.kind === 'unknown') {
        return 'someone';
    }
    const name = a.name || a.id || a.kind;
    return a.email ? `${name} <${a.email}>` : `${name} (${a.kind})`;
}

function pretty(args) {
    try {
        return JSON.stringify(JSON.parse(args), null, 1);
    } catch {
        return String(args ?? '');
    }
}

export function sessionPage(fleet, sid, main) {
    let model = new SessionModel();
    const calls = new Map();  // call id -> its group's element
    const title = h('h1', {}, 'Session ', h('span', {class: 'sid'}, sid));
    const statusLine = h('p', {id: 'status', class: 'status'}, 'loading…');
    const usageLine = h('p', {id: 'usage', class: 'muted'});
    const transcript = h('ol', {id: 'transcript', class: 'transcript'});
    const streaming = h('li', {id: 'streaming', class: 'entry assistant streaming', hidden: true});
    const approvals = h('section', {id: 'approvals', class: 'panel'});
    const lanes = h('section', {id: 'lanes', class: 'panel'});
    const settings = h('section', {id: 'settings', class: 'panel'});

    const buttons = {
        abort: h('button', {id: 'abort', title: 'Stop the turn in progress'}, 'Abort'),
        pause: h('button', {id: 'pause'}, 'Pause'),
        resume: h('button', {id: 'resume'}, 'Resume'),
    };
    // An abort whose reply was lost keeps its id for 30 s: clicked again meanwhile, it is the
    // same abort (the fleet answers it again), never one that stops the turn that came next.
    let lostAbort = null;  // {id, at}
    buttons.abort.addEventListener(
        'click', () => act(buttons.abort, 'Abort', async () => {
                     const id =
                         lostAbort && Date.now() - lostAbort.at < 30000 ? lostAbort.id : newId();
                     lostAbort = null;
                     try {
                         await fleet.call(sid, 'abort', {reason: 'aborted from the console', id});
                     } catch (e) {
                         if (e.code === 'no_reply') {
                             lostAbort = {id, at: Date.now()};
                         }
                         throw e;
                     }
                 }));
    buttons.pause.addEventListener(
        'click', () => act(buttons.pause, 'Pause', () => fleet.call(sid, 'pause')));
    buttons.resume.addEventListener(
        'click', () => act(buttons.resume, 'Resume', () => fleet.call(sid, 'resume')));

    const compose = h(
        'form', {id: 'compose', class: 'compose'},
        h('textarea', {name: 'content', rows: 3, placeholder: 'Message', required: true}),
        h('select', {name: 'lane'}, h('option', {value: 'followUp'}, 'follow-up (after the turn)'),
          h('option', {value: 'steer'}, 'steer (at the next checkpoint)')),
        h('input', {name: 'name', placeholder: 'your name', size: 12}),
        h('button', {type: 'submit', id: 'send'}, 'Send'));
    let unsent = null;  // the message sent last, until it is answered
    compose.addEventListener('submit', (ev) => {
        ev.preventDefault();
        const f = compose.elements;
        const content = f.content.value;
        const body = {lane: f.lane.value, content};
        if (f.name.value.trim()) {
            body.author = {
                id: f.name.value.trim().replace(/[^ -~]/g, '').slice(0, 128) || 'console',
                name: f.name.value.trim(),
                kind: 'human'
            };
        }
        // One id for this message, however often it is sent: again after a lost reply, the
        // same message (lane and text) keeps its id, and the fleet queues it once.
        if (!unsent || unsent.lane !== body.lane || unsent.content !== content) {
            unsent = {lane: body.lane, content, id: newId()};
        }
        body.id = unsent.id;
        act(f[3] || compose.querySelector('#send'), 'Send', async () => {
            await fleet.call(sid, 'enqueue', body);
            unsent = null;
            if (f.content.value === content) {
                f.content.value = '';
            }
        });
    });

    main.append(
        h('section', {id: 'session'}, h('p', {}, h('a', {href: '#/fleet'}, '← sessions')), title,
          statusLine, usageLine,
          h('div', {class: 'controls'}, buttons.abort, buttons.pause, buttons.resume),
          h('div', {class: 'columns'}, h('div', {class: 'main-column'}, transcript, compose),
            h('div', {class: 'side-column'}, approvals, lanes, settings))));
    transcript.append(streaming);

    // ---- the transcript
    function header(text, at) {
        return h('div', {class: 'header'}, h('span', {}, text), h('time', {}, when(at)));
    }

    function callGroup(call) {
        const g =
            h('div', {class: 'tool-call', dataset: {call: call.id}},
              h('div', {class: 'call-head'}, h('code', {}, call.name), ' ',
                h('span', {class: 'call-state'}, 'requested')),
              h('pre', {class: 'arguments'}, pretty(call.arguments)),
              h('div', {class: 'call-events'}));
        calls.set(call.id, g);
        return g;
    }

    function onCall(id, f) {
        const g = calls.get(id);
        if (g) {
            f(g, g.querySelector('.call-events'), g.querySelector('.call-state'));
        }
    }

    function entryView(e) {
        switch (e.type) {
            case 'party_message':
                return h(
                    'li', {class: `entry party lane-${e.lane}`, dataset: {entry: e.id}},
                    header(`${author(e.author)} · ${e.lane}`, e.at),
                    h('div', {class: 'content'}, e.content));
            case 'system_message':
                return h(
                    'li', {class: 'entry system', dataset: {entry: e.id}},
                    header(`system · ${e.source}`, e.at), h('div', {class: 'content'}, e.content));
            case 'assistant_message': {
                const usage = e.usage ? `${e.usage.input ?? 0} in, ${e.usage.output ?? 0} out` : '';
                return h(
                    'li', {class: 'entry assistant', dataset: {entry: e.id}},
                    header(
                        `assistant${e.model ? ` · ${e.model}` : ''}${usage ? ` · ${usage}` : ''}${
                            e.cost ? ` · ${dollars(e.cost)}` : ''}`,
                        e.at),
                    e.text ? h('div', {class: 'content'}, e.text) : null,
                    (e.tool_calls || []).map(callGroup));
            }
            case 'tool_started':
                onCall(e.call, (_g, _ev, st) => (st.textContent = 'running'));
                return null;
            case 'tool_result':
                onCall(e.call, (g, ev, st) => {
                    st.textContent = e.is_error ? 'error' : 'done';
                    g.classList.toggle('error', !!e.is_error);
                    ev.append(h('pre', {class: `result${e.is_error ? ' error' : ''}`}, e.output));
                });
                return calls.has(e.call) ?
                    null :
                    h('li', {class: 'entry tool', dataset: {entry: e.id}},
                      header(`result of ${e.tool}`, e.at), h('pre', {}, e.output));
            case 'approval_requested':
                onCall(e.call, (_g, ev, st) => {
                    st.textContent = 'awaiting approval';
                    ev.append(
                        h('p', {class: 'asked'},
                          `asks for approval${
                              e.deadline ? `; ${e.on_deadline} at ${when(e.deadline)}` : ''}`));
                });
                return null;
            case 'approval_decided':
                onCall(
                    e.call,
                    (_g, ev) => ev.append(
                        h('p', {class: 'decided'},
                          `${DECIDED[e.decision] || e.decision} by ${
                              e.by_deadline ? 'the deadline' :
                                              author(e.by)}${e.message ? `: ${e.message}` : ''}`)));
                return null;
            case 'interruption':
                return h(
                    'li', {class: 'entry interruption', dataset: {entry: e.id}},
                    header(
                        e.kind === 'owner_lost' ? 'interrupted: its worker stopped' :
                                                  `aborted${e.stopped ? ` (${e.stopped})` : ''}`,
                        e.at),
                    e.reason ? h('div', {class: 'content'}, e.reason) : null);
            case 'compaction':
                return h(
                    'li', {class: 'entry compaction', dataset: {entry: e.id}},
                    h('details', {},
                      h('summary', {},
                        `compaction: earlier messages summarized (${
                            e.tokens_before} tokens before) · ${when(e.at)}`),
                      h('div', {class: 'content'}, e.summary)));
            case 'diagnostic':
                return h(
                    'li', {class: 'entry diagnostic', dataset: {entry: e.id}},
                    h('details', {}, h('summary', {}, `${e.code} · ${when(e.at)}`),
                      h('div', {class: 'content'}, e.message)));
            default:
                return h(
                    'li', {class: 'entry', dataset: {entry: e.id}}, header(String(e.type), e.at));
        }
    }

    function renderStreaming() {
        const s = model.streaming;
        streaming.hidden = !s;
        if (!s) {
            clear(streaming);
            return;
        }
        clear(streaming).append(
            header('assistant · streaming…', Date.now()), h('div', {class: 'content'}, s.text),
            s.calls.map(
                (c) =>
                    h('div', {class: 'tool-call'}, h('code', {}, c.name), ' ',
                      h('pre', {class: 'arguments'}, pretty(c.arguments)))));
    }

    // ---- the registers, lanes and approvals
    function renderStatus() {
        const st = model.status || {};
        const paused = st.paused ? 'paused' : '';
        // A deleted session stays so until it is made again.
        const state =
            model.deleted && model.entries.length === 0 ? 'deleted' : st.state || 'unknown';
        statusLine.className = `status state-${state}`;
        statusLine.textContent =
            `${state}${paused ? ' · paused' : ''}${st.has_work ? ' · has work' : ''}`;
        buttons.pause.hidden = !!st.paused;
        buttons.resume.hidden = !st.paused;
        const u = st.usage || {};
        const budget = model.settings && model.settings.budget ? model.settings.budget : {};
        const limits =
            Object.entries(budget).filter(([k]) => k !== 'soft_percent').map(([k,
                                                                               v]) => `${k} ${v}`);
        usageLine.textContent = `usage: ${u.turns ?? 0} turns, ${
                                    u.tool_calls ?? 0} tool calls; tokens in ${u.input ?? 0} ` +
            `(cached ${u.cached_input ?? 0}), out ${u.output ?? 0}; cost ${dollars(u.cost)}` +
            `; budget: ${limits.length ? limits.join(', ') : 'none'}`;
    }

    let shownApprovals = null;
    function renderApprovals() {
        const waiting = model.awaitingApproval();
        // Drawn again only when the calls that wait change: what a person typed stays.
        const key = waiting.map((a) => a.call).join('\n');
        if (key === shownApprovals) {
            return;
        }
        shownApprovals = key;
        clear(approvals).append(h('h2', {}, `Waiting for approval (${waiting.length})`));
        for (const a of waiting) {
            const args = h('textarea', {class: 'edit-args', rows: 3}, pretty(a.arguments));
            const text = h('input', {class: 'decision-text', placeholder: 'message or result'});
            const row =
                h('div', {class: 'approval', dataset: {call: a.call}},
                  h('div', {}, h('code', {}, a.tool), ` call ${a.call}`,
                    a.deadline ? ` · ${a.on_deadline} at ${when(a.deadline)}` : ''),
                  args, text);
            const decide = (verb, body, label) => {
                const b = h('button', {class: verb, dataset: {verb: label}}, label);
                b.addEventListener(
                    'click',
                    () => act(b, label, () => fleet.call(sid, verb, {call: a.call, ...body()})));
                return b;
            };
            row.append(
                decide('approve', () => ({}), 'Approve'),
                decide(
                    'approve',
                    () => {
                        try {
                            return {arguments: JSON.parse(args.value)};
                        } catch {
                            throw {
                                code: 'invalid_arguments',
                                message: 'the edited arguments are not JSON'
                            };
                        }
                    },
                    'Edit and approve'),
                decide('reject', () => (text.value ? {message: text.value} : {}), 'Reject'),
                decide('respond', () => ({output: text.value}), 'Respond'));
            approvals.append(row);
        }
    }

    let shownLanes = null;
    async function cancel(lane, id) {
        const r = await fleet.call(sid, 'cancel', {lane, id});
        if (r.canceled === false) {
            throw {code: 'not_canceled', message: 'the session had already taken it (or it fired)'};
        }
    }

    function renderLanes() {
        const key = JSON.stringify(
            [LANES.map((l) => model.pending(l).map((i) => i.id)), [...model.timers.keys()]]);
        if (key === shownLanes) {
            return;
        }
        shownLanes = key;
        clear(lanes).append(h('h2', {}, 'Queued'));
        for (const lane of LANES) {
            const items = model.pending(lane);
            const list = h('ul', {class: 'pending', dataset: {lane}});
            for (const i of items) {
                const b = lane === 'system' ? null : h('button', {class: 'cancel'}, 'Cancel');
                if (b) {
                    b.addEventListener('click', () => act(b, 'Cancel', () => cancel(lane, i.id)));
                }
                list.append(h('li', {}, h('span', {class: 'content'}, i.content), ' ', b));
            }
            if (lane === 'system') {
                for (const t of model.timers.values()) {
                    const b = h('button', {class: 'cancel'}, 'Cancel');
                    b.addEventListener(
                        'click', () => act(b, 'Cancel', () => cancel('system', t.id)));
                    list.append(
                        h('li', {}, `callback at ${when(t.due)}: `,
                          h('span', {class: 'content'}, t.content), ' ', b));
                }
            }
            lanes.append(h('h3', {}, `${lane} (${list.children.length})`), list);
        }
    }

    function renderSettings() {
        const s = model.settings || {};
        const key = JSON.stringify([s.model, s.system_prompt, s.tools]);
        if (settings.dataset.editing === 'yes' || key === shownSettings) {
            return;  // unchanged, or a person is typing: the form keeps what they typed
        }
        shownSettings = key;
        const form =
            h('form', {id: 'configure'}, h('h2', {}, 'Settings'),
              h('label', {}, 'Model ', h('input', {name: 'model', value: s.model || ''})),
              h('label', {}, 'System prompt ',
                h('textarea', {name: 'system_prompt', rows: 3}, s.system_prompt || '')),
              h('label', {}, 'Tools (comma-separated; empty: all) ',
                h('input', {name: 'tools', value: (s.tools || []).join(', ')})),
              h('button', {type: 'submit', id: 'save-settings'}, 'Configure'));
        form.addEventListener('input', () => (settings.dataset.editing = 'yes'));
        form.addEventListener('submit', (ev) => {
            ev.preventDefault();
            const f = form.elements;
            // Only what the person changed: a setting someone else changed meanwhile stays.
            const update = {};
            const tools = f.tools.value.split(',').map((t) => t.trim()).filter(Boolean);
            if (f.model.value.trim() !== (s.model || '')) {
                update.model = f.model.value.trim();
            }
            if (f.system_prompt.value !== (s.system_prompt || '')) {
                update.system_prompt = f.system_prompt.value;
            }
            if (tools.join(',') !== (s.tools || []).join(',')) {
                update.tools = tools;
            }
            act(form.querySelector('button'), 'Configure', async () => {
                await fleet.call(sid, 'configure', update);
                settings.dataset.editing = '';
                shownSettings = null;
                renderSettings();
            });
        });
        clear(settings).append(form);
    }

    let shownSettings = null;
    let dirty = false;
    function changed() {
        if (dirty) {
            return;
        }
        dirty = true;
        queueMicrotask(() => {
            dirty = false;
            renderStatus();
            renderApprovals();
            renderLanes();
            renderSettings();
        });
    }

    const watch = fleet.watch(sid, {
        onPatch: (p) => {
            for (const e of model.applyPatch(p)) {
                const view = entryView(e);
                if (view) {
                    transcript.insertBefore(view, streaming);
                }
            }
            renderStreaming();
            changed();
        },
        onDelta: (d) => {
            model.applyDelta(d);
            renderStreaming();
        },
        onDeleted: () => {
            // Gone for good; a session made again under this id starts anew (the watch reads
            // it from the start).
            model = new SessionModel();
            model.deleted = true;
            calls.clear();
            for (const el of [...transcript.children]) {
                if (el !== streaming) {
                    el.remove();
                }
            }
            shownApprovals = shownLanes = shownSettings = null;
            renderStreaming();
            changed();
        },
        onError: (e) => showError(e, 'Watching the session'),
    });
    return {stop: () => watch.stop()};
}
