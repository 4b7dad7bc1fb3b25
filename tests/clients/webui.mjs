// webui.mjs — the chat page of `moe8 serve` (GET /) driven in Debian's headless
// Chromium through puppeteer-core, run by tests/test_serve_webui.c against two
// servers on the tiny Qwen3 fixture:
//   - MAIN (under --api-key): the page says a key is needed; the key typed in
//     the settings is kept in localStorage and the model's name appears; with
//     temperature 0, a system prompt and max_tokens set in the settings, a
//     message sent with Enter streams into the assistant bubble in pieces,
//     and the text equals the same request's through the API (not streamed);
//     the user's HTML is shown as text; a long answer (max_tokens large)
//     stopped with the Stop button ends the stream, keeps what came, and the
//     page is ready again (a next message is answered, the history holding
//     the stopped turn);
//   - CHAIN (no key; the chain model of serve_test.h, which thinks "Let me
//     think" before "Hello!"): the reasoning in a folded <details>, the
//     answer beside it, both equal to the API's reasoning_content / content.
// The C test checks the server's side (the stop as one aborted request in
// /metrics) and that no browser process outlives this script.
//
//   node webui.mjs CLIENTS_DIR CHROMIUM PROFILE_DIR SCREENSHOT MAIN_URL KEY CHAIN_URL
//
// Prints one JSON line {checks: [{name, ok, detail}]}; exit 1 on a thrown
// error (its message on stderr). The browser is closed (killed if need be)
// on every path.
import { createRequire } from 'node:module';
import { join } from 'node:path';

const [clientsDir, chromium, profileDir, screenshot, mainURL, apiKey, chainURL] = process.argv.slice(2);
const require = createRequire(join(clientsDir, 'package.json'));
const { default: puppeteer } = await import(require.resolve('puppeteer-core'));

const checks = [];
const check = (name, ok, detail = '') => checks.push({ name, ok: !!ok, detail: String(detail).slice(0, 600) });
const T = 60000; // the longest wait for one step (the sanitizer build is slow)

// The same request through the API, not streamed: its message.
async function reference(base, key, body) {
  const headers = { 'Content-Type': 'application/json' };
  if (key) headers.Authorization = `Bearer ${key}`;
  const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers, body: JSON.stringify(body) });
  const j = await r.json();
  if (!r.ok) throw new Error(`reference request: ${r.status} ${JSON.stringify(j)}`);
  return { ...j.choices[0].message, finish: j.choices[0].finish_reason };
}

// Set a settings field as a user does (select all, type), firing input/change.
async function setField(page, id, value) {
  await page.focus(`#${id}`);
  await page.keyboard.down('Control');
  await page.keyboard.press('KeyA');
  await page.keyboard.up('Control');
  await page.keyboard.press('Backspace');
  await page.type(`#${id}`, String(value));
  await page.$eval(`#${id}`, (el) => el.dispatchEvent(new Event('change')));
}

// Type a message and send it with Enter; resolves once the page is streaming or done.
async function sendMessage(page, text) {
  const n = await page.$$eval('.msg.assistant', (a) => a.length);
  await page.type('#input', text);
  await page.keyboard.press('Enter');
  await page.waitForFunction((n) => document.querySelectorAll('.msg.assistant').length === n + 1, { timeout: T }, n);
}

// The last assistant bubble once it is finished: its text, reasoning, finish, status,
// and every length its text had while it streamed.
async function lastAnswer(page) {
  await page.waitForFunction(() => {
    const a = [...document.querySelectorAll('.msg.assistant')].pop();
    return a && a.dataset.finish && document.body.dataset.state === 'ready';
  }, { timeout: T });
  return page.evaluate(() => {
    const a = [...document.querySelectorAll('.msg.assistant')].pop();
    const d = a.querySelector('details.reasoning');
    return {
      text: a.querySelector('.content').textContent, finish: a.dataset.finish,
      status: a.querySelector('.status').textContent, reasoning: d.hidden ? null : d.lastChild.textContent,
      folded: !d.open, lengths: window.__lengths || [],
    };
  });
}

// Record the lengths the last assistant bubble's text goes through (its stream's pieces).
async function watchLengths(page) {
  await page.evaluate(() => {
    window.__lengths = [];
    new MutationObserver(() => {
      const c = [...document.querySelectorAll('.msg.assistant .content')].pop();
      const n = c ? c.textContent.length : 0;
      if (n && window.__lengths[window.__lengths.length - 1] !== n) window.__lengths.push(n);
    }).observe(document.getElementById('messages'), { subtree: true, childList: true, characterData: true });
  });
}

async function testMain(browser) {
  const page = await browser.newPage();
  await page.setViewport({ width: 900, height: 900 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const resp = await page.goto(`${mainURL}/`, { waitUntil: 'load', timeout: T });
  check('page loads', resp.status() === 200 && resp.headers()['content-type'] === 'text/html; charset=utf-8',
        `${resp.status()} ${resp.headers()['content-type']}`);
  await page.waitForFunction(() => document.getElementById('model').className === 'error', { timeout: T });
  const noKey = await page.$eval('#model', (e) => e.textContent);
  check('without the key the page asks for it', /API key/.test(noKey), noKey);

  // settings: the key (the model's name appears), temperature 0, a system prompt, max_tokens
  await page.click('#toggle-settings');
  await setField(page, 'api_key', apiKey);
  await page.waitForFunction(() => document.getElementById('model').className === '', { timeout: T });
  const models = await (await fetch(`${mainURL}/v1/models`, { headers: { Authorization: `Bearer ${apiKey}` } })).json();
  const name = await page.$eval('#model', (e) => e.textContent);
  check('model name from /v1/models', name === models.data[0].id, `${name} vs ${models.data[0].id}`);
  const system = 'You answer briefly.';
  await setField(page, 'temperature', 0);
  await setField(page, 'max_tokens', 48);
  await page.type('#system', system);
  const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('moe8.webui.settings')));
  check('settings and the key kept in localStorage',
        stored.api_key === apiKey && stored.temperature === '0' && stored.system === system, JSON.stringify(stored));
  await page.click('#toggle-settings');

  // a message streamed, equal to the API's answer at temperature 0; its HTML shown as text
  const q1 = 'Hello <b>there</b> & <img src=x onerror="window.__xss=1">!';
  await watchLengths(page);
  await sendMessage(page, q1);
  const a1 = await lastAnswer(page);
  const user = await page.$eval('.msg.user .content', (e) => ({ text: e.textContent, html: e.children.length }));
  check('user text shown as text', user.text === q1 && user.html === 0 && !(await page.evaluate(() => window.__xss)),
        JSON.stringify(user));
  const messages = [{ role: 'system', content: system }, { role: 'user', content: q1 }];
  const ref1 = await reference(mainURL, apiKey, { model: name, messages, temperature: 0, max_tokens: 48 });
  check('streamed answer equals the API answer', a1.text === ref1.content && a1.text.length > 0,
        `page ${JSON.stringify(a1.text)}\napi  ${JSON.stringify(ref1.content)}`);
  check('finish reason shown', a1.finish === ref1.finish && (a1.finish !== 'length' || /token limit/.test(a1.status)),
        `${a1.finish} ${a1.status} vs ${ref1.finish}`);

  // a long answer stopped once it streams: the stream ends, the page is ready again
  await page.click('#toggle-settings');
  await setField(page, 'max_tokens', 3000);
  await page.click('#toggle-settings');
  await watchLengths(page);
  await sendMessage(page, 'Tell me a very long story.');
  await page.waitForFunction(() => {
    const a = [...document.querySelectorAll('.msg.assistant')].pop();
    if (a.dataset.finish) throw new Error(`the long answer ended before Stop: ${a.innerText.slice(-300)}`);
    return window.__lengths.length >= 2 && !document.getElementById('stop').hidden;
  }, { timeout: T, polling: 20 });
  await page.click('#stop');
  const a2 = await lastAnswer(page);
  const ready = await page.evaluate(() => ({
    state: document.body.dataset.state, send: !document.getElementById('send').hidden,
    stop: document.getElementById('stop').hidden,
  }));
  check('stop ends the stream', a2.finish === 'stopped' && a2.status === 'stopped' && a2.text.length > 0,
        `${a2.finish} '${a2.status}' ${a2.text.length} chars`);
  check('text shown while it streams', a2.lengths.length >= 2 && a2.lengths[a2.lengths.length - 1] === a2.text.length,
        JSON.stringify(a2.lengths.slice(0, 20)));
  check('ready after stop', ready.state === 'ready' && ready.send && ready.stop, JSON.stringify(ready));

  // the page answers again, the stopped turn in the history it sends
  await page.click('#toggle-settings');
  await setField(page, 'max_tokens', 24);
  await page.click('#toggle-settings');
  const q3 = 'Thanks. And now?';
  await sendMessage(page, q3);
  const a3 = await lastAnswer(page);
  const ref3 = await reference(mainURL, apiKey, {
    model: name, temperature: 0, max_tokens: 24,
    messages: messages.concat([{ role: 'assistant', content: a1.text }, { role: 'user', content: 'Tell me a very long story.' },
                               { role: 'assistant', content: a2.text }, { role: 'user', content: q3 }]),
  });
  check('next message after stop (history kept)', a3.text === ref3.content && a3.text.length > 0,
        `page ${JSON.stringify(a3.text)}\napi  ${JSON.stringify(ref3.content)}`);
  check('no script errors', errors.length === 0, errors.join('; '));
  if (screenshot) await page.screenshot({ path: screenshot });
  await page.close();
}

async function testChain(browser) {
  const page = await browser.newPage();
  await page.setViewport({ width: 900, height: 700 });
  await page.goto(`${chainURL}/`, { waitUntil: 'load', timeout: T });
  await page.waitForFunction(() => document.getElementById('model').className === '' &&
                             document.getElementById('model').textContent !== 'loading…', { timeout: T });
  const name = await page.$eval('#model', (e) => e.textContent);
  await page.click('#toggle-settings');
  await setField(page, 'temperature', 0);
  await page.click('#toggle-settings');
  await sendMessage(page, 'hi');
  const a = await lastAnswer(page);
  const ref = await reference(chainURL, null, { model: name, messages: [{ role: 'user', content: 'hi' }], temperature: 0 });
  check('reasoning shown folded', a.folded && a.reasoning === ref.reasoning_content && a.reasoning.length > 0,
        `folded ${a.folded} page ${JSON.stringify(a.reasoning)} api ${JSON.stringify(ref.reasoning_content)}`);
  check('answer beside the reasoning', a.text === ref.content && a.text.length > 0,
        `page ${JSON.stringify(a.text)} api ${JSON.stringify(ref.content)}`);
  if (screenshot) {
    await page.click('details.reasoning summary'); // unfolded, for the picture
    await page.screenshot({ path: screenshot.replace(/\.png$/, '_thinking.png') });
  }
  await page.close();
}

let browser;
const stop = async () => {
  if (!browser) return;
  const proc = browser.process();
  await Promise.race([browser.close().catch(() => {}), new Promise((r) => setTimeout(r, 5000))]);
  if (proc && proc.exitCode === null) proc.kill('SIGKILL');
  browser = null;
};
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => stop().finally(() => process.exit(1)));
try {
  browser = await puppeteer.launch({
    executablePath: chromium, headless: true, userDataDir: profileDir, timeout: T,
    args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  });
  await testMain(browser);
  await testChain(browser);
} catch (e) {
  await stop();
  console.error(e && e.stack ? e.stack : String(e));
  console.log(JSON.stringify({ checks }));
  process.exit(1);
}
await stop();
console.log(JSON.stringify({ checks }));
