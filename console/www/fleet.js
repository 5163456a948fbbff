// The fleet page: the fleet view (docs/protocol.md "The fleet view"), a page at a time,
// filtered by state, owner, has_work and awaiting approval, refreshed every two seconds.
import {dollars, when} from './model.js';
import {clear, clearError, h, showError} from './ui.js';
import {isToken} from './wuhu.js';

const STATES = [
    '', 'idle', 'preparing', 'inferring', 'executing_tools', 'compacting', 'awaiting_approval',
    'unloaded', 'unowned', 'unreachable'
];
const PAGE = 20;

function select(name, options, value) {
    return h(
        'select', {name},
        options.map(([v, label]) => h('option', {value: v, selected: v === value}, label)));
}

export function fleetPage(fleet, main, query) {
    const filters = {
        state: query.get('state') || '',
        owner: query.get('owner') || '',
        has_work: query.get('has_work') || '',
        awaiting: query.get('awaiting') || '',
    };
    let cursors = [''];  // the `after` of each page seen, for going back
    let timer = null;
    let stopped = false;

    const form =
        h('form', {class: 'filters', id: 'fleet-filters'},
          h('label', {}, 'State ',
            select('state', STATES.map((s) => [s, s || 'any']), filters.state)),
          h('label', {}, 'Owner ',
            h('input', {name: 'owner', value: filters.owner, placeholder: 'worker id', size: 14})),
          h('label', {}, 'Has work ',
            select('has_work', [['', 'any'], ['true', 'yes'], ['false', 'no']], filters.has_work)),
          h('label', {}, 'Awaiting approval ',
            select('awaiting', [['', 'any'], ['true', 'yes'], ['false', 'no']], filters.awaiting)),
          h('button', {type: 'submit'}, 'Filter'));
    const open =
        h('form', {class: 'open', id: 'open-session'},
          h('label', {}, 'Session ',
            h('input', {name: 'sid', placeholder: 'session id', required: true, size: 20})),
          h('button', {type: 'submit'}, 'Open'));
    const table = h('table', {id: 'sessions'});
    const pager = h('div', {class: 'pager'});
    const status = h('p', {class: 'muted', id: 'fleet-status'});
    main.append(
        h('section', {id: 'fleet'}, h('h1', {}, 'Sessions'), form, open, status, table, pager));

    form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        const q = new URLSearchParams();
        for (const k of ['state', 'owner', 'has_work', 'awaiting']) {
            const v = form.elements[k].value.trim();
            if (v) {
                q.set(k, v);
            }
        }
        location.hash = `#/fleet?${q}`;
    });
    open.addEventListener('submit', (ev) => {
        ev.preventDefault();
        const sid = open.elements.sid.value.trim();
        if (!isToken(sid)) {
            showError(
                {code: 'invalid_session_id', message: 'a session id is 1-64 of A-Z a-z 0-9 _ -'},
                'Opening');
            return;
        }
        location.hash = `#/session/${sid}`;
    });

    function queryOf(after) {
        const q = {limit: PAGE};
        if (filters.state) {
            q.state = filters.state;
        }
        if (filters.owner) {
            q.owner = filters.owner;
        }
        if (filters.has_work) {
            q.has_work = filters.has_work === 'true';
        }
        if (filters.awaiting) {
            q.awaiting_approval = filters.awaiting === 'true';
        }
        if (after) {
            q.after = after;
        }
        return q;
    }

    function render(reply) {
        const rows = reply.sessions || [];
        const withTenant = rows.some((r) => 'tenant' in r);
        clear(table).append(h(
            'thead', {}, h('tr', {}, withTenant ? h('th', {}, 'tenant') : null, [
                'session', 'state', 'owner', 'has work', 'paused', 'lanes (system/steer/followUp)',
                'timers', 'last activity', 'approvals', 'cost', 'tokens'
            ].map((t) => h('th', {}, t)))));
        const body = h('tbody');
        for (const r of rows) {
            const sid = String(r.id);
            const lanes = r.lanes || {};
            body.append(h(
                'tr', {dataset: {sid}}, withTenant ? h('td', {}, r.tenant ?? '') : null,
                h('td', {},
                  isToken(sid) && !withTenant ? h('a', {href: `#/session/${sid}`}, sid) : sid),
                h('td', {class: `state ${r.state}`}, r.state), h('td', {}, r.owner || ''),
                h('td', {}, r.has_work ? 'yes' : 'no'), h('td', {}, r.paused ? 'paused' : ''),
                h('td', {}, `${lanes.system ?? 0} / ${lanes.steer ?? 0} / ${lanes.followUp ?? 0}`),
                h('td', {}, r.timers ? `${r.timers}, next ${when(r.next_timer)}` : '0'),
                h('td', {}, when(r.last_activity)), h('td', {}, String(r.approvals ?? 0)),
                h('td', {}, dollars(r.cost)), h('td', {}, String(r.tokens ?? 0))));
        }
        if (rows.length === 0) {
            body.append(
                h('tr', {}, h('td', {colspan: 12, class: 'muted'}, 'No sessions on this page.')));
        }
        table.append(body);
        clear(pager).append(
            h('span', {}, `page ${cursors.length}`),
            h('button', {
                id: 'first-page',
                disabled: cursors.length === 1,
                onclick: () => {
                    cursors = [''];
                    load();
                }
            },
              'First'),
            h('button', {
                id: 'prev-page',
                disabled: cursors.length === 1,
                onclick: () => {
                    cursors.pop();
                    load();
                }
            },
              'Previous'),
            h('button', {
                id: 'next-page',
                disabled: !reply.next,
                onclick: () => {
                    cursors.push(reply.next);
                    load();
                }
            },
              'Next'));
        status.textContent = `${rows.length} sessions${
            reply.unreachable && reply.unreachable.length ?
                `; owners not answering: ${reply.unreachable.join(', ')}` :
                ''}; refreshed ${new Date().toLocaleTimeString()}`;
    }

    // Each load is numbered: only the latest one draws the page and sets the next refresh (a
    // page asked before a click on Next must not draw over the page after it).
    let generation = 0;
    async function load() {
        clearTimeout(timer);
        const mine = ++generation;
        try {
            const reply = await fleet.sessions(queryOf(cursors[cursors.length - 1]));
            if (stopped || mine !== generation) {
                return;
            }
            render(reply);
            clearError();
        } catch (e) {
            if (stopped || mine !== generation) {
                return;
            }
            showError(e, 'Listing the sessions');
        }
        timer = setTimeout(load, 2000);
    }
    load();
    return {
        stop: () => {
            stopped = true;
            clearTimeout(timer);
        },
    };
}
