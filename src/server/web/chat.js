// mla.cpp's chat page (chat.html): streams /v1/chat/completions, keeps conversations in
// localStorage, and shows for each answer what the server did (tokens, timings, prefix-cache hit,
// MLA path counts from /metrics). Model text only ever becomes DOM text nodes, never HTML: the
// page has no innerHTML at all, and its Content-Security-Policy (Trusted Types) would refuse one.
'use strict';

const $ = (id) => document.getElementById(id);
const KEY_CHATS = 'mla.chat.conversations';
const KEY_CURRENT = 'mla.chat.current';
const KEY_SETTINGS = 'mla.chat.settings';
const SETTING_FIELDS = { apiKey: 'api-key', system: 'system', temperature: 'temperature', topP: 'top-p',
  maxTokens: 'max-tokens', tools: 'tools' };

let chats = loadChats();  // [{id, title, messages: [message]}], newest first
let currentId = localStorage.getItem(KEY_CURRENT);
let modelId = null;
let controller = null;  // the AbortController of the request in flight

// A message: {role: 'user' | 'assistant', content, and for an assistant: reasoning, toolCalls
// [{id, name, arguments}], finish, error, stats}.

function loadJson(key, fallback) {
  try { return JSON.parse(localStorage.getItem(key)) ?? fallback; } catch { return fallback; }
}

function loadChats() {
  const stored = loadJson(KEY_CHATS, []);
  if (!Array.isArray(stored)) return [];
  const valid = stored.filter((c) => Array.isArray(c?.messages));
  for (const c of valid) for (const m of c.messages) if (m.role === 'assistant') m.toolCalls ??= [];
  return valid;
}

function save() {
  try {
    localStorage.setItem(KEY_CHATS, JSON.stringify(chats));
    localStorage.setItem(KEY_CURRENT, currentId ?? '');
  } catch (e) {
    setStatus(`conversations not saved: ${e.message}`);
  }
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) e.setAttribute(k, v);
  e.append(...children.filter((c) => c !== null && c !== undefined));  // strings become text nodes
  return e;
}

function setStatus(text) { $('status').textContent = text; }

// ---- Markdown -------------------------------------------------------------------------------
// A small subset, built as DOM nodes: paragraphs, headings, fenced code, lists, quotes; inline
// code, bold, italic and links. Anything it does not know stays text.

const BLOCK_START = /^\s*(`{3,}|~{3,}|#{1,6}\s|([-*+]|\d+[.)])\s+|>)/;

function renderMarkdown(src, parent) {
  const lines = src.replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(`{3,}|~{3,})\s*([\w+#.-]*)/);
    const heading = line.match(/^\s*(#{1,6})\s+(.*)$/);
    if (fence) {
      const body = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence[1]); i++) body.push(lines[i]);
      i++;  // the closing fence (not there yet while the answer streams)
      const code = el('code', null, body.join('\n'));
      if (fence[2]) code.dataset.lang = fence[2];
      parent.append(el('pre', null, code));
    } else if (!line.trim()) {
      i++;
    } else if (heading) {
      parent.append(inline(el('h' + heading[1].length), heading[2]));
      i++;
    } else if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) {
      i = renderList(lines, i, parent);
    } else if (/^\s*>/.test(line)) {
      const body = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) body.push(lines[i++].replace(/^\s*>\s?/, ''));
      parent.append(renderMarkdown(body.join('\n'), el('blockquote')));
    } else {  // a paragraph: lines up to a blank line or the start of another block
      const p = el('p');
      do {
        if (p.firstChild) p.append(el('br'));
        inline(p, lines[i++]);
      } while (i < lines.length && lines[i].trim() && !BLOCK_START.test(lines[i]));
      parent.append(p);
    }
  }
  return parent;
}

// One list from lines[i]; returns the index after it. Nested items are flattened.
function renderList(lines, i, parent) {
  const ordered = /^\s*\d/.test(lines[i]);
  const item = ordered ? /^\s*\d+[.)]\s+(.*)$/ : /^\s*[-*+]\s+(.*)$/;
  const list = el(ordered ? 'ol' : 'ul');
  if (ordered && parseInt(lines[i], 10) !== 1) list.setAttribute('start', parseInt(lines[i], 10));
  let li = null;
  for (; i < lines.length; i++) {
    const m = lines[i].match(item);
    if (m) {
      li = inline(el('li'), m[1]);
      list.append(li);
    } else if (li && /^\s{2,}\S/.test(lines[i]) && !BLOCK_START.test(lines[i])) {
      li.append(el('br'));
      inline(li, lines[i].trim());
    } else {
      break;
    }
  }
  parent.append(list);
  return i;
}

// Code spans | [label](url) | **bold** | __bold__ | *italic* | _italic_ | a bare http(s) URL.
const INLINE = new RegExp([
  /(`+)([^\n]+?)\1(?!`)/.source,
  /\[([^\]\n]+)\]\(([^()\s]+)\)/.source,
  /\*\*(?=\S)([^\n]*?\S)\*\*/.source,
  /(?<!\w)__(?=\S)([^\n]*?\S)__(?!\w)/.source,
  /\*(?=[^\s*])([^*\n]*?[^\s*])\*/.source,
  /(?<!\w)_(?=[^\s_])([^_\n]*?[^\s_])_(?!\w)/.source,
  /(https?:\/\/[^\s<>()]*[^\s<>().,;:!?'"])/.source,
].join('|'), 'g');

function inline(parent, text) {
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) parent.append(text.slice(last, m.index));
    if (m[1] !== undefined) parent.append(el('code', null, m[2]));
    else if (m[3] !== undefined) parent.append(link(m[4], m[0], (a) => inline(a, m[3])));
    else if (m[5] !== undefined || m[6] !== undefined) parent.append(inline(el('strong'), m[5] ?? m[6]));
    else if (m[7] !== undefined || m[8] !== undefined) parent.append(inline(el('em'), m[7] ?? m[8]));
    else parent.append(link(m[9], m[9], (a) => a.append(m[9])));
    last = m.index + m[0].length;
  }
  if (last < text.length) parent.append(text.slice(last));
  return parent;
}

// An anchor for absolute http:, https: and mailto: URLs only; any other (javascript:, data:,
// relative) shows as the text it was written as.
function link(href, source, fill) {
  let url = null;
  try { url = new URL(href); } catch { /* not an absolute URL */ }
  if (!url || !['http:', 'https:', 'mailto:'].includes(url.protocol)) return document.createTextNode(source);
  const a = el('a', { href: url.href, target: '_blank', rel: 'noopener noreferrer nofollow' });
  fill(a);
  return a;
}

// ---- The server -----------------------------------------------------------------------------

function authHeaders() {
  const key = $('api-key').value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// "HTTP <status>: <the server's message>" from an error response.
async function errorText(response) {
  const raw = await response.text();
  let message = raw;
  try { message = JSON.parse(raw).error?.message ?? raw; } catch { /* not JSON: the raw body */ }
  return `HTTP ${response.status}: ${message}`;
}

async function loadModel() {
  try {
    const r = await fetch('/v1/models', { headers: authHeaders() });
    if (!r.ok) {
      setStatus(r.status === 401 ? 'enter the API key (Settings)' : await errorText(r));
      if (r.status === 503) setTimeout(loadModel, 2000);  // still loading
      return;
    }
    const card = (await r.json()).data[0];
    modelId = card.id;
    $('model').textContent = card.id;
    $('ctx').textContent = card.max_model_len ? `context ${card.max_model_len} tokens` : '';
    setStatus('');
  } catch (e) {
    setStatus(`server unreachable: ${e.message}`);
  }
}

// The JSON payloads of a text/event-stream body as they arrive, up to `data: [DONE]`.
async function* sseEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error('the connection closed before the answer ended');
    buffer += value;
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const data = buffer.slice(0, end).split('\n').filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).trimStart()).join('\n');
      buffer = buffer.slice(end + 2);
      if (data === '[DONE]') return;
      if (data) yield JSON.parse(data);
    }
  }
}

// The /metrics counters an answer is measured by (Prometheus text), or null.
const COUNTERS = /^mla:(prompt_tokens_total|generation_tokens_total|prefix_cache_hits_total|attention_path_tokens_total)(\{[^}]*\})? (\S+)$/;

async function readCounters() {
  try {
    const r = await fetch('/metrics');
    if (!r.ok) return null;
    const out = {};
    for (const line of (await r.text()).split('\n')) {
      const m = line.match(COUNTERS);
      if (!m) continue;
      const path = m[2]?.match(/path="(\w+)"/);
      const key = path ? `${m[1]}:${path[1]}` : m[1];
      out[key] = (out[key] ?? 0) + Number(m[3]);
    }
    return out;
  } catch {
    return null;
  }
}

function requestBody(chat) {
  const body = { model: modelId ?? undefined, messages: [], stream: true, stream_options: { include_usage: true } };
  const system = $('system').value.trim();
  if (system) body.messages.push({ role: 'system', content: system });
  for (const m of chat.messages) {
    if (m.role === 'user') {
      body.messages.push({ role: 'user', content: m.content });
    } else if (m.content || m.toolCalls?.length) {
      const out = { role: 'assistant', content: m.content };
      if (m.toolCalls?.length) {
        out.tool_calls = m.toolCalls.filter(Boolean).map((c) => (
          { id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
      }
      body.messages.push(out);
    }
  }
  const number = (id) => ($(id).value.trim() === '' ? undefined : Number($(id).value));
  body.temperature = number('temperature');
  body.top_p = number('top-p');
  body.max_tokens = number('max-tokens');
  const tools = $('tools').value.trim();
  if (tools) {
    try { body.tools = JSON.parse(tools); } catch (e) { throw new Error(`Tools (Settings) is not JSON: ${e.message}`); }
  }
  return body;
}

// One answer: streams it into msg (shown by view), then measures it.
async function generate(chat, msg, view) {
  controller = new AbortController();
  setBusy(true);
  const before = await readCounters();
  const t0 = performance.now();
  let tFirst = null;
  let usage = null;
  let frame = null;  // the redraw scheduled for the next animation frame
  const redraw = () => {
    frame ??= requestAnimationFrame(() => { frame = null; updateAssistant(view, msg, true); });
  };
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST', signal: controller.signal,
      headers: { 'Content-Type': 'application/json', ...authHeaders() },
      body: JSON.stringify(requestBody(chat)),
    });
    if (!r.ok) throw new Error(await errorText(r));
    for await (const event of sseEvents(r)) {
      if (event.error) throw new Error(`server error: ${event.error.message ?? JSON.stringify(event.error)}`);
      if (event.usage) usage = event.usage;
      for (const choice of event.choices ?? []) applyDelta(msg, choice);
      if (tFirst === null && (msg.content || msg.reasoning || msg.toolCalls.length)) tFirst = performance.now();
      redraw();
    }
  } catch (e) {
    if (e.name === 'AbortError') msg.finish = 'stopped';
    else msg.error = e.message;
  }
  const tEnd = performance.now();
  if (frame !== null) cancelAnimationFrame(frame);
  controller = null;
  const after = usage ? await readCounters() : null;
  msg.stats = answerStats(usage, { t0, tFirst, tEnd }, before, after);
  updateAssistant(view, msg, false);
  save();
  setBusy(false);
}

function applyDelta(msg, choice) {
  const d = choice.delta ?? {};
  msg.content += d.content ?? '';
  // The server sends the same text under both names (DeepSeek's and vLLM's); take one.
  msg.reasoning += d.reasoning_content ?? d.reasoning ?? '';
  for (const tc of d.tool_calls ?? []) {
    const call = (msg.toolCalls[tc.index ?? 0] ??= { id: '', name: '', arguments: '' });
    if (tc.id) call.id = tc.id;
    call.name += tc.function?.name ?? '';
    call.arguments += tc.function?.arguments ?? '';
  }
  if (choice.finish_reason) msg.finish = choice.finish_reason;
}

// Tokens and timings from the answer itself; the prefix-cache hit from usage when the server
// reports it there, else, with the MLA path counts, from the /metrics counters read before and
// after. Those are server-wide: `alone` says whether the token counters moved by exactly this
// answer's tokens (no other request ran meanwhile).
const MIN_RATE_WINDOW_MS = 20;

function answerStats(usage, t, before, after) {
  const s = {};
  if (t.tFirst !== null) {
    s.ttftMs = t.tFirst - t.t0;
    s.decodeMs = t.tEnd - t.tFirst;
  }
  if (!usage) return s;
  s.prompt = usage.prompt_tokens;
  s.completion = usage.completion_tokens;
  // The decode rate, from the first token's arrival to the last's; not over a window so short
  // (tokens that came in one burst) that the browser's clock and scheduling would make the figure.
  if (usage.completion_tokens > 1 && s.decodeMs >= MIN_RATE_WINDOW_MS)
    s.tokensPerSecond = (usage.completion_tokens - 1) / (s.decodeMs / 1000);
  const cached = usage.prompt_tokens_details?.cached_tokens;
  if (cached !== undefined && cached !== null) s.cached = cached;
  if (before && after) {
    const delta = (k) => (after[k] ?? 0) - (before[k] ?? 0);
    s.alone = delta('prompt_tokens_total') === usage.prompt_tokens &&
      delta('generation_tokens_total') === usage.completion_tokens;
    s.cached ??= delta('prefix_cache_hits_total');
    s.mha = delta('attention_path_tokens_total:mha');
    s.mqa = delta('attention_path_tokens_total:mqa');
  }
  return s;
}

// ---- Views ----------------------------------------------------------------------------------

function assistantView() {
  const v = {
    box: el('div', { class: 'msg assistant' }),
    reasoning: el('details', { class: 'reasoning' }),
    summary: el('summary'),
    thoughts: el('div', { class: 'thoughts' }),
    content: el('div', { class: 'content' }),
    tools: el('div', { class: 'tools' }),
    error: el('div', { class: 'error', role: 'alert' }),
    stats: el('div', { class: 'stats' }),
    answering: false,  // the answer (or a call) has started: the reasoning was folded
  };
  v.reasoning.append(v.summary, v.thoughts);
  v.box.append(v.reasoning, v.content, v.tools, v.error, v.stats);
  return v;
}

function updateAssistant(v, msg, streaming) {
  const answering = Boolean(msg.content || msg.toolCalls.length);
  v.reasoning.hidden = !msg.reasoning;
  if (msg.reasoning) {
    // Open while the model thinks, folded once it answers (then it is the reader's to open).
    if (streaming && !v.answering && !answering) v.reasoning.open = true;
    if (answering && !v.answering) v.reasoning.open = false;
    v.summary.textContent = streaming && !answering ? 'Thinking…' : `Reasoning (${msg.reasoning.trim().length} characters)`;
    v.thoughts.replaceChildren();
    renderMarkdown(msg.reasoning, v.thoughts);
  }
  v.answering = answering;
  v.content.replaceChildren();
  renderMarkdown(msg.content, v.content);
  v.tools.replaceChildren(...msg.toolCalls.filter(Boolean).map(toolCallView));
  v.error.hidden = !msg.error;
  v.error.textContent = msg.error ?? '';
  v.stats.replaceChildren(...(streaming ? [] : statsView(msg)));
  const box = $('messages');
  if (box.scrollHeight - box.scrollTop - box.clientHeight < 120) box.scrollTop = box.scrollHeight;
}

function toolCallView(call) {
  let args = call.arguments;
  try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* still streaming, or not JSON */ }
  return el('div', { class: 'tool-call' }, 'tool call ', el('span', { class: 'name' }, call.name),
    el('pre', null, el('code', null, args)));
}

function statsView(msg) {
  const s = msg.stats ?? {};
  const parts = [];
  const add = (text, title) => parts.push(el('span', title ? { title } : null, text));
  if (s.prompt !== undefined) add(`${s.prompt} prompt + ${s.completion} completion tokens`);
  if (s.ttftMs !== undefined) add(`first token ${Math.round(s.ttftMs)} ms`);
  if (s.tokensPerSecond !== undefined) add(`${s.tokensPerSecond.toFixed(1)} tokens/s`, 'after the first token');
  if (s.cached !== undefined) add(`prefix cache ${s.cached}/${s.prompt} tokens`, 'prompt tokens served from the prefix cache');
  if (s.mha + s.mqa > 0) {  // none from a model that counts no paths (mla serve --scripted-output)
    add(`MLA paths: mha ${s.mha}, mqa ${s.mqa} tokens`, 'tokens the model sent down each attention path (/metrics)');
    if (!s.alone) add('(server-wide: other requests ran meanwhile)');
  }
  if (msg.finish && msg.finish !== 'stop') add(`finish: ${msg.finish}`);
  return parts;
}

function currentChat() { return chats.find((c) => c.id === currentId) ?? null; }

function renderChats() {
  $('chats').replaceChildren(...chats.map((c) => {
    const title = el('span', { class: 'title', title: c.title }, c.title || 'New chat');
    title.addEventListener('click', () => {
      if (controller) return;
      currentId = c.id;
      save();
      render();
    });
    const remove = el('button', { class: 'delete', type: 'button', title: 'Delete', 'aria-label': 'Delete' }, '×');
    remove.addEventListener('click', () => {
      if (controller && c.id === currentId) return;
      chats = chats.filter((x) => x !== c);
      if (c.id === currentId) currentId = chats[0]?.id ?? null;
      save();
      render();
    });
    return el('li', c.id === currentId ? { class: 'current' } : null, title, remove);
  }));
}

function appendMessage(msg) {
  if (msg.role === 'user') {
    $('messages').append(el('div', { class: 'msg user' }, msg.content));
  } else {
    const v = assistantView();
    $('messages').append(v.box);
    updateAssistant(v, msg, false);
  }
}

function render() {
  renderChats();
  $('messages').replaceChildren();
  for (const msg of currentChat()?.messages ?? []) appendMessage(msg);
  $('messages').scrollTop = $('messages').scrollHeight;
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('regenerate').disabled = busy;
  $('stop').disabled = !busy;
  setStatus(busy ? 'generating…' : '');
}

// ---- Actions --------------------------------------------------------------------------------

function newChat() {
  const chat = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 8), title: '', messages: [] };
  chats.unshift(chat);
  currentId = chat.id;
  return chat;
}

function answer(chat) {
  const msg = { role: 'assistant', content: '', reasoning: '', toolCalls: [], finish: null, error: null, stats: null };
  chat.messages.push(msg);
  const v = assistantView();
  $('messages').append(v.box);
  updateAssistant(v, msg, true);
  save();
  return generate(chat, msg, v);
}

function send() {
  const text = $('input').value.trim();
  if (!text || controller) return;
  const chat = currentChat() ?? newChat();
  const msg = { role: 'user', content: text };
  chat.messages.push(msg);
  if (!chat.title) chat.title = text.slice(0, 60);
  $('input').value = '';
  renderChats();
  appendMessage(msg);  // the views above stay as they are (a reasoning block the reader opened)
  answer(chat);
}

function regenerate() {
  const chat = currentChat();
  if (!chat || controller) return;
  while (chat.messages.at(-1)?.role === 'assistant') {
    chat.messages.pop();
    $('messages').lastElementChild?.remove();
  }
  if (!chat.messages.length) return;
  answer(chat);
}

function init() {
  const settings = loadJson(KEY_SETTINGS, {});
  for (const [name, id] of Object.entries(SETTING_FIELDS)) {
    if (settings[name] !== undefined) $(id).value = settings[name];
    $(id).addEventListener('change', () => {
      const all = loadJson(KEY_SETTINGS, {});
      all[name] = $(id).value;
      localStorage.setItem(KEY_SETTINGS, JSON.stringify(all));
      if (name === 'apiKey') loadModel();
    });
  }
  $('new-chat').addEventListener('click', () => {
    if (controller) return;
    newChat();
    save();
    render();
    $('input').focus();
  });
  $('send').addEventListener('click', send);
  $('stop').addEventListener('click', () => controller?.abort());
  $('regenerate').addEventListener('click', regenerate);
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  setBusy(false);
  render();
  loadModel();
}

init();
