// Parses Wuhu's saved provider streams (tests/data/providers/*.sse) with the official openai
// and @anthropic-ai/sdk clients, serving each stream through the client's `fetch` option, and
// prints what they parsed as one JSON object per stream: text, tool calls (id, name,
// arguments as JSON text), usage. tests/broker/sdk_proctest.cpp compares it with what Wuhu
// parses from the same bytes.
//
//   node streams.mjs <tests/data/providers>
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const dir = process.argv[2];

function serving(bytes) {
    return async () => new Response(bytes, {
        status: 200,
        headers: { 'content-type': 'text/event-stream' },
    });
}

async function openai(name) {
    const client = new OpenAI({ apiKey: 'sk-test', baseURL: 'http://127.0.0.1:9/v1',
                                fetch: serving(readFileSync(`${dir}/${name}`)) });
    const stream = await client.chat.completions.create({
        model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true,
        stream_options: { include_usage: true } });
    let text = '';
    const calls = new Map();
    let usage = null;
    for await (const chunk of stream) {
        if (chunk.usage) {
            usage = chunk.usage;
        }
        for (const choice of chunk.choices ?? []) {
            text += choice.delta?.content ?? '';
            for (const t of choice.delta?.tool_calls ?? []) {
                const c = calls.get(t.index) ?? { id: '', name: '', arguments: '' };
                c.id = t.id ?? c.id;
                c.name = t.function?.name ?? c.name;
                c.arguments += t.function?.arguments ?? '';
                calls.set(t.index, c);
            }
        }
    }
    const cached = usage?.prompt_tokens_details?.cached_tokens ?? 0;
    return {
        text,
        tool_calls: [...calls.keys()].sort((a, b) => a - b).map((k) => calls.get(k)),
        usage: { input: usage.prompt_tokens - cached, cached_input: cached,
                 output: usage.completion_tokens, cache_write: 0 },
    };
}

async function anthropic(name) {
    const client = new Anthropic({ apiKey: 'sk-test', baseURL: 'http://127.0.0.1:9',
                                   fetch: serving(readFileSync(`${dir}/${name}`)) });
    const stream = client.messages.stream({
        model: 'm', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] });
    const m = await stream.finalMessage();
    return {
        text: m.content.filter((b) => b.type === 'text').map((b) => b.text).join(''),
        tool_calls: m.content.filter((b) => b.type === 'tool_use')
            .map((b) => ({ id: b.id, name: b.name, arguments: JSON.stringify(b.input) })),
        usage: { input: m.usage.input_tokens, cached_input: m.usage.cache_read_input_tokens ?? 0,
                 output: m.usage.output_tokens,
                 cache_write: m.usage.cache_creation_input_tokens ?? 0 },
    };
}

const out = {};
for (const name of ['openai_text.sse', 'openai_tools.sse']) {
    out[name] = await openai(name);
}
for (const name of ['anthropic_text.sse', 'anthropic_tools.sse']) {
    out[name] = await anthropic(name);
}
process.stdout.write(JSON.stringify(out) + '\n');
