// Building the page: elements made with text only (never HTML from the fleet: every byte of
// a transcript is someone else's), and the banner that shows errors a person can act on.
import {advice} from './wuhu.js';

// h("button", {class: "x", onclick: f, disabled: true}, "text", child, ...)
export function h(tag, props = {}, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
        if (v === undefined || v === null || v === false) {
            continue;
        }
        if (k.startsWith('on') && typeof v === 'function') {
            el.addEventListener(k.slice(2), v);
        } else if (k === 'class') {
            el.className = v;
        } else if (k === 'dataset') {
            Object.assign(el.dataset, v);
        } else if (k in el && typeof v !== 'string') {
            el[k] = v;
        } else {
            el.setAttribute(k, v === true ? '' : String(v));
        }
    }
    for (const c of children.flat()) {
        if (c === undefined || c === null || c === false) {
            continue;
        }
        el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
}

export function clear(el) {
    while (el.firstChild) {
        el.firstChild.remove();
    }
    return el;
}

// Shows an error from the fleet: what happened (its code and message) and what to do.
export function showError(e, doing) {
    const banner = document.getElementById('banner');
    const code = e && e.code ? e.code : 'error';
    const tip = advice(code);
    clear(banner).append(
        h('strong', {}, doing ? `${doing} failed: ` : 'Failed: '),
        h('span', {class: 'code'}, code),
        ' ',
        h('span', {}, e && e.message ? e.message : String(e)),
        tip ? h('span', {class: 'tip'}, ` ${tip}`) : '',
        h('button', {class: 'close', onclick: () => (banner.hidden = true), title: 'Dismiss'}, '×'),
    );
    banner.hidden = false;
}

export function clearError() { document.getElementById('banner').hidden = true; }

// Runs a command from a button: disabled while it runs (a double click sends nothing twice,
// and the command's id makes any retry the same request), its error shown.
export async function act(button, doing, f) {
    if (button) {
        if (button.disabled) {
            return undefined;
        }
        button.disabled = true;
    }
    try {
        const r = await f();
        clearError();
        return r;
    } catch (e) {
        showError(e, doing);
        return undefined;
    } finally {
        if (button) {
            button.disabled = false;
        }
    }
}
