// The console's entry: connects (with the credentials asked for, or given in the URL), then
// shows the fleet page (#/fleet) or a session's (#/session/<id>).
import {fleetPage} from './fleet.js';
import {sessionPage} from './session.js';
import {clearError, showError} from './ui.js';
import {Fleet, isToken} from './wuhu.js';

let fleet = null;
let page = null;  // the page shown: {stop()}

const $ = (id) => document.getElementById(id);

// The connection's fields given in the address. A password is taken from it once and removed
// (from the address bar and the history), so that a link copied from the page never holds it.
function params() {
    const q = new URLSearchParams(location.search);
    if (q.has('pass')) {
        const kept = new URLSearchParams(q);
        kept.delete('pass');
        history.replaceState(null, '', `${location.pathname}?${kept}${location.hash}`);
    }
    return {
        nats: q.get('nats') || '',
        user: q.get('user') || '',
        pass: q.get('pass') || '',
        inbox: q.get('inbox') || '',
        prefix: q.get('prefix') || 'wuhu',
        tenant: q.get('tenant') || '',
    };
}

async function open(p) {
    const inboxPrefix = p.inbox || (p.user ? `_INBOX_${p.user}` : '');
    fleet = await Fleet.open({
        servers: p.nats,
        user: p.user,
        pass: p.pass,
        inboxPrefix,
        prefix: p.prefix || 'wuhu',
        tenant: p.tenant,
    });
    $('who').textContent =
        `${p.user || 'anonymous'} @ ${p.nats}${p.tenant ? ` (tenant ${p.tenant})` : ''}`;
    $('logout').hidden = false;
    $('login').hidden = true;
    const who = $('who').textContent;
    (async () => {
        for await (const s of fleet.nc.status()) {
            if (s.type === 'disconnect') {
                $('who').textContent = `${who} · connection lost, reconnecting…`;
            } else if (s.type === 'reconnect') {
                $('who').textContent = who;
            }
        }
    })().catch(() => {});
    fleet.nc.closed().then(() => {
        if (fleet) {
            showError(
                {code: 'not_connected', message: 'the connection to nats-server closed'},
                'Connection');
        }
    });
    route();
}

function login() {
    const p = params();
    const form = $('login');
    for (const k of ['nats', 'user', 'inbox', 'prefix', 'tenant']) {
        form.elements[k].value = p[k];
    }
    form.hidden = false;
    form.onsubmit = async (ev) => {
        ev.preventDefault();
        const f = form.elements;
        const given = {
            nats: f.nats.value.trim(),
            user: f.user.value.trim(),
            pass: f.pass.value,
            inbox: f.inbox.value.trim(),
            prefix: f.prefix.value.trim(),
            tenant: f.tenant.value.trim(),
        };
        const button = form.querySelector('button');
        button.disabled = true;
        try {
            await open(given);
            $('login-error').hidden = true;
        } catch (e) {
            $('login-error').textContent = e.message;
            $('login-error').hidden = false;
        } finally {
            button.disabled = false;
        }
    };
}

function route() {
    if (!fleet) {
        return;
    }
    if (page) {
        page.stop();
        page = null;
    }
    clearError();
    const main = $('main');
    for (const el of [...main.children]) {
        if (el.id !== 'login') {
            el.remove();
        }
    }
    const hash = location.hash || '#/fleet';
    const m = /^#\/session\/([^/?]+)/.exec(hash);
    let sid = '';
    try {
        sid = m ? decodeURIComponent(m[1]) : '';
    } catch {
        sid = '';  // not an id: the fleet page
    }
    if (isToken(sid)) {
        page = sessionPage(fleet, sid, main);
    } else {
        page = fleetPage(fleet, main, new URLSearchParams(hash.split('?')[1] || ''));
    }
}

window.addEventListener('hashchange', route);
$('logout').addEventListener('click', async () => {
    const f = fleet;
    fleet = null;
    if (page) {
        page.stop();
        page = null;
    }
    await f.close();
    location.hash = '';
    location.reload();
});

// A link connects at once only to a nats-server on the page's own host; one that names another
// host fills in the form, for the person to see where they connect before they do.
function ownHost(url) {
    try {
        return new URL(url).hostname === location.hostname;
    } catch {
        return false;
    }
}

const given = params();
if (given.nats && ownHost(given.nats) && (given.pass || !given.user)) {
    open(given).catch((e) => {
        showError(e, 'Connecting');
        login();
    });
} else {
    login();
}
