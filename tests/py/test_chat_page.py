"""The chat page `mla serve` answers at / (src/server/web), in a real headless browser: Debian's
chromium driven through chromium-driver by selenium. One server runs the embedded tiny model (a
real stream, measured: tokens, timings, MLA path counts), behind an API key the page is given;
another has its outputs scripted (--scripted-output, everything above the model's forward pass
real) with Qwen3's chat template, so that it writes reasoning, a tool call and markup on cue.
Set MLA_CHAT_PAGE_SCREENSHOT=docs/chat-page.png to write the README's screenshot."""
from __future__ import annotations

import json
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
import requests
from agent_util import TOOLS, VOCAB_MODEL, rendered_reply, scripted_server

from server_util import Server

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as e:  # pragma: no cover - the venv pins selenium
    webdriver = None
    SELENIUM_ERROR = str(e)

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
_missing = [what for what, ok in (("chromium (Debian package chromium)", CHROMIUM),
                                  ("chromedriver (Debian package chromium-driver)", CHROMEDRIVER),
                                  ("selenium (tools/requirements-test.txt)", webdriver)) if not ok]
if _missing:
    pytest.skip(f"CHAT PAGE BROWSER TEST NOT RUN: {', '.join(_missing)} not installed "
                "(scripts/install-deps.sh installs them)", allow_module_level=True)

API_KEY = "page-test-key"
# Enough tokens that the decode rate is measured (the page needs 20 ms of them).
MAX_TOKENS = 100
SEA = "Tell me a long story about the sea, the ships and the people on them."
TEMPLATE = "Qwen-Qwen3-0.6B.jinja"
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}
ASK_WEATHER = "What is the weather in Paris?"
ASK_MARKUP = "Show me some markup."
ASK_SOFTMAX = "How do I compute a softmax?"
# What a hostile or confused model might write: every piece must show as text or as inert markup.
MARKUP = ('Careful: <script>window.pwned = "script"</script> and '
          '<img src=x onerror="window.pwned = \'img\'"> stay text. '
          '[a trap](javascript:window.pwned=1) [the docs](https://example.com/a_b) **bold** `<b>code</b>`\n\n'
          '```html\n<script>window.pwned = "fence"</script>\n```')
# Qwen3's output starts inside the reasoning.
MARKUP_THOUGHT = "<think>\nThey want <script>window.pwned = 'thought'</script> markup.\n</think>\n\n"
SOFTMAX = ("<think>\nSubtract the maximum first, so that exp cannot overflow.\n</think>\n\n"
           "Shift by the maximum, exponentiate, normalize:\n\n"
           "1. `m = max(x)`\n2. `e = exp(x - m)`\n3. divide by `sum(e)`\n\n"
           "```python\nimport numpy as np\n\ndef softmax(x):\n    e = np.exp(x - x.max())\n"
           "    return e / e.sum()\n```\n\nThe result sums to **1**.")


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1180,760", "--lang=en-US"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def tiny():
    """The embedded tiny model, behind an API key."""
    server = Server(VOCAB_MODEL, "--api-key", API_KEY)
    yield server
    assert server.stop() == 0, server.log


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    weather = rendered_reply(TEMPLATE, ASK_WEATHER, {"role": "assistant", "content": "Checking.",
                                                     "reasoning_content": "Need the weather.",
                                                     "tool_calls": [CALL]}, tools=TOOLS)
    # The first entry whose trigger is in the conversation wins: later questions first.
    script = [{"trigger": ASK_SOFTMAX, "output": SOFTMAX}, {"trigger": ASK_MARKUP, "output": MARKUP_THOUGHT + MARKUP},
              {"trigger": ASK_WEATHER, "output": weather}]
    server = scripted_server(tmp_path_factory.mktemp("chat-page"), TEMPLATE, script)
    yield server
    assert server.stop() == 0, server.log


def open_page(driver, server):
    driver.get(server.url + "/")
    driver.execute_script("localStorage.clear()")
    driver.get(server.url + "/")
    return WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "status"))


def set_field(driver, field_id, value):
    """Types a setting as a user would (the page saves it on `change`, i.e. on leaving the field)."""
    field = driver.find_element(By.ID, field_id)
    field.clear()
    field.send_keys(str(value))
    field.send_keys(Keys.TAB)


def ask(driver, text, timeout=90):
    """Sends text with Enter; returns the last assistant message element once the answer ended."""
    driver.find_element(By.ID, "input").send_keys(text, Keys.ENTER)
    WebDriverWait(driver, timeout).until(
        lambda d: d.find_element(By.ID, "send").is_enabled() and not d.find_element(By.ID, "stop").is_enabled())
    return driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1]


def stored_messages(driver):
    """The current conversation as the page keeps it in localStorage."""
    chats = json.loads(driver.execute_script("return localStorage.getItem('mla.chat.conversations')"))
    current = driver.execute_script("return localStorage.getItem('mla.chat.current')")
    return next(c for c in chats if c["id"] == current)["messages"]


def page_errors(driver):
    """Console entries that mean the page broke: a script error, a CSP or Trusted Types violation.
    (HTTP error responses also log, as 'Failed to load resource': those are the tests' own.)"""
    return [e["message"] for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]]


def screenshot(driver, path):
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000, "blank screenshot?"


def test_page_routes_and_headers(tiny, tmp_path):
    r = requests.get(tiny.url + "/", timeout=10)  # no key: the page is public, the API is not
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/html; charset=utf-8"
    csp = r.headers["Content-Security-Policy"]
    for directive in ("default-src 'none'", "script-src 'self'", "connect-src 'self'",
                      "require-trusted-types-for 'script'", "frame-ancestors 'none'"):
        assert directive in csp, csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert '<script src="/chat.js" defer></script>' in r.text and "<style" not in r.text
    for path, ctype in (("/chat.js", "text/javascript"), ("/chat.css", "text/css")):
        a = requests.get(tiny.url + path, timeout=10)
        assert a.status_code == 200 and a.headers["Content-Type"].startswith(ctype), (path, a.headers)
        assert a.headers["Content-Security-Policy"] == csp
    total = sum(len(requests.get(tiny.url + p, timeout=10).content) for p in ("/", "/chat.js", "/chat.css"))
    assert total < 40_000, f"the page has grown to {total} bytes"
    assert requests.get(tiny.url + "/v1/models", timeout=10).status_code == 401

    off = Server(VOCAB_MODEL, "--no-chat-page")
    try:
        for path in ("/", "/chat.js", "/chat.css"):
            r = requests.get(off.url + path, timeout=10)
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", (path, r.text)
    finally:
        assert off.stop() == 0, off.log


def test_real_model_streams_and_is_measured(browser, tiny, tmp_path):
    status = open_page(browser, tiny)
    WebDriverWait(browser, 20).until(lambda d: "API key" in status.text)
    # Without the key the server refuses; the page shows the server's own message.
    msg = ask(browser, "Hello")
    assert "HTTP 401: missing or invalid API key" in msg.find_element(By.CLASS_NAME, "error").text

    set_field(browser, "api-key", API_KEY)
    WebDriverWait(browser, 20).until(lambda d: d.find_element(By.ID, "model").text == "tiny-deepseek2")
    assert browser.find_element(By.ID, "ctx").text == "context 256 tokens"
    set_field(browser, "temperature", 0)
    set_field(browser, "max-tokens", MAX_TOKENS)
    browser.find_element(By.ID, "new-chat").click()
    msg = ask(browser, SEA)
    assert not msg.find_element(By.CLASS_NAME, "error").is_displayed()
    stored = stored_messages(browser)
    answer, stats = stored[-1]["content"], stored[-1]["stats"]

    # The same request through the API, after the page's: the same text (greedy) and usage.
    r = requests.post(tiny.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {API_KEY}"},
                      json={"model": "tiny-deepseek2", "messages": [{"role": "user", "content": SEA}],
                            "temperature": 0, "top_p": 1, "max_tokens": MAX_TOKENS}, timeout=60).json()
    assert answer == r["choices"][0]["message"]["content"] and answer.strip()
    assert (stats["prompt"], stats["completion"]) == (r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"])
    assert stats["alone"] and stats["cached"] == 0  # a fresh server, no other request meanwhile
    # Every token the model computed went down one MLA path: the prompt, and each generated token
    # but the last.
    assert stats["mha"] + stats["mqa"] == stats["prompt"] + stats["completion"] - 1
    assert stats["ttftMs"] > 0
    # The rate needs 20 ms of tokens (MAX_TOKENS gives this model more than that on two cores).
    assert ("tokensPerSecond" in stats) == (stats["decodeMs"] >= 20), stats
    shown = msg.find_element(By.CLASS_NAME, "stats").text
    rate = ["tokens/s"] if "tokensPerSecond" in stats else []
    for part in (f"{stats['prompt']} prompt + {stats['completion']} completion tokens", "first token", *rate,
                 f"prefix cache 0/{stats['prompt']} tokens", f"MLA paths: mha {stats['mha']}, mqa {stats['mqa']} tokens"):
        assert part in shown, shown
    # A finish reason is shown when it is not "stop".
    assert ("finish: length" in shown) == (r["choices"][0]["finish_reason"] == "length"), shown
    assert "server-wide" not in shown

    # Regenerate: the answer is replaced (greedy: the same text), now partly from the prefix cache.
    browser.find_element(By.ID, "regenerate").click()
    WebDriverWait(browser, 60).until(lambda d: stored_messages(d)[-1].get("stats"))
    again = stored_messages(browser)
    assert len(again) == 2 and again[-1]["content"] == answer and again[-1]["stats"]["cached"] > 0

    # Stop: an answer aborted at once ends as stopped, with no error.
    browser.execute_script("document.getElementById('input').value = 'Another one';"
                           "document.getElementById('send').click(); document.getElementById('stop').click();")
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "send").is_enabled())
    assert stored_messages(browser)[-1]["finish"] == "stopped"
    assert "finish: stopped" in browser.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1].text

    # Kept in the browser: after a reload both conversations are listed; one can be deleted.
    browser.refresh()
    titles = WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chats .title"))
    assert [t.text for t in titles] == [SEA[:60], "Hello"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#messages .msg")) == 4
    browser.find_elements(By.CSS_SELECTOR, "#chats .delete")[1].click()
    assert [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#chats .title")] == [SEA[:60]]
    screenshot(browser, tmp_path / "chat-page-tiny.png")
    assert page_errors(browser) == []


def test_server_error_is_shown(browser, tiny):
    open_page(browser, tiny)
    set_field(browser, "api-key", API_KEY)
    set_field(browser, "max-tokens", 100000)  # beyond the 256-token context
    msg = ask(browser, "Hello there")
    want = requests.post(tiny.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {API_KEY}"},
                         json={"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 100000,
                               "stream": True, "stream_options": {"include_usage": True}}, timeout=30)
    assert want.status_code == 400
    assert msg.find_element(By.CLASS_NAME, "error").text == f"HTTP 400: {want.json()['error']['message']}"
    assert page_errors(browser) == []


# The renderer's subset of markdown (CommonMark's rules where it has the construct), as the
# browser serializes the nodes it builds; model text is text whatever it holds.
MARKDOWN = [
    ("a **b** *c* `d` __e__ _f_", "<p>a <strong>b</strong> <em>c</em> <code>d</code> <strong>e</strong> <em>f</em></p>"),
    ("snake_case_name and 2*3*4", "<p>snake_case_name and 2<em>3</em>4</p>"),
    ("**a *b* c**", "<p><strong>a <em>b</em> c</strong></p>"),
    ("``a`b``", "<p><code>a`b</code></p>"),
    ("line one\nline two\n\nnext", "<p>line one<br>line two</p><p>next</p>"),
    ("## Title\n> quoted", "<h2>Title</h2><blockquote><p>quoted</p></blockquote>"),
    ("1. one\n2. two\n\n3. three", '<ol><li>one</li><li>two</li></ol><ol start="3"><li>three</li></ol>'),
    ("- a\n  more\n- b", "<ul><li>a<br>more</li><li>b</li></ul>"),
    ("```js\nlet a = 1 < 2;\n```", '<pre><code data-lang="js">let a = 1 &lt; 2;</code></pre>'),
    ("```\nno closing fence yet", "<pre><code>no closing fence yet</code></pre>"),
    ("[x](https://a.example/p?q=1&r=2)",
     '<p><a href="https://a.example/p?q=1&amp;r=2" target="_blank" rel="noopener noreferrer nofollow">x</a></p>'),
    ("see https://a.example/b.",
     '<p>see <a href="https://a.example/b" target="_blank" rel="noopener noreferrer nofollow">https://a.example/b</a>.</p>'),
    ("[x](javascript:alert(1)) [y](data:text/html,hi) [z](/relative)",
     "<p>[x](javascript:alert(1)) [y](data:text/html,hi) [z](/relative)</p>"),
    ('<img src=x onerror="alert(1)"> <script>alert(2)</script>',
     "<p>&lt;img src=x onerror=\"alert(1)\"&gt; &lt;script&gt;alert(2)&lt;/script&gt;</p>"),
    ("**`<b>`**", "<p><strong><code>&lt;b&gt;</code></strong></p>"),
]


def test_markdown(browser, tiny):
    open_page(browser, tiny)
    render = "return renderMarkdown(arguments[0], document.createElement('div')).innerHTML"
    got = [(src, browser.execute_script(render, src)) for src, _ in MARKDOWN]
    assert got == MARKDOWN
    assert page_errors(browser) == []


def test_tools_that_are_not_json(browser, tiny):
    open_page(browser, tiny)
    set_field(browser, "api-key", API_KEY)
    set_field(browser, "tools", "[{not json")
    msg = ask(browser, "Hello there")
    assert msg.find_element(By.CLASS_NAME, "error").text.startswith("Tools (Settings) is not JSON: ")


MOCK_ERROR = {"message": "generation failed: a worker rank is gone", "type": "server_error", "param": None,
              "code": 503}


class MidStreamError(BaseHTTPRequestHandler):
    """Serves the page's files as `mla serve` does (copied from it, headers included) and a chat
    stream that fails after its first words with an error event, in the shape `mla serve` sends
    one (generation_job.cpp: {"error": {...}}, then [DONE]), which the live server has no
    deterministic way to produce."""
    files: ClassVar[dict] = {}  # path -> (body, headers)

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path in self.files:
            body, headers = self.files[self.path]
            self.send_response(200)
            for k, v in headers.items():
                self.send_header(k, v)
        elif self.path == "/v1/models":
            body = json.dumps({"object": "list", "data": [{"id": "mock", "max_model_len": 64}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            body = b""
            self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        chunk = {"object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": "Partial answer"}, "finish_reason": None}]}
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in (chunk, {"error": MOCK_ERROR})) + "data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())


def test_error_event_in_the_stream(browser, tiny):
    keep = ("Content-Type", "Content-Security-Policy", "X-Content-Type-Options")
    for path in ("/", "/chat.js", "/chat.css"):
        r = requests.get(tiny.url + path, timeout=10)
        MidStreamError.files[path] = (r.content, {k: r.headers[k] for k in keep})
    mock = ThreadingHTTPServer(("127.0.0.1", 0), MidStreamError)
    threading.Thread(target=mock.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://127.0.0.1:{mock.server_port}/")
        browser.execute_script("localStorage.clear()")
        browser.refresh()
        WebDriverWait(browser, 20).until(lambda d: d.find_element(By.ID, "model").text == "mock")
        msg = ask(browser, "Hello")
        assert msg.find_element(By.CLASS_NAME, "content").text == "Partial answer"
        assert msg.find_element(By.CLASS_NAME, "error").text == f"server error: {MOCK_ERROR['message']}"
        assert page_errors(browser) == []
    finally:
        mock.shutdown()


def test_reasoning_and_tool_call(browser, scripted, tmp_path):
    open_page(browser, scripted)
    set_field(browser, "tools", json.dumps(TOOLS))
    msg = ask(browser, ASK_WEATHER)
    reasoning = msg.find_element(By.CLASS_NAME, "reasoning")
    assert reasoning.is_displayed() and reasoning.get_attribute("open") is None  # folded once answered
    assert reasoning.find_element(By.TAG_NAME, "summary").text == "Reasoning (17 characters)"
    reasoning.find_element(By.TAG_NAME, "summary").click()
    assert reasoning.find_element(By.CLASS_NAME, "thoughts").text == "Need the weather."
    opened = reasoning
    assert msg.find_element(By.CLASS_NAME, "content").text == "Checking."
    call = msg.find_element(By.CLASS_NAME, "tool-call")
    assert call.find_element(By.CLASS_NAME, "name").text == "get_weather"
    assert json.loads(call.find_element(By.TAG_NAME, "pre").text) == {"city": "Paris", "days": 3}
    assert "finish: tool_calls" in msg.find_element(By.CLASS_NAME, "stats").text

    # The next turn sends the call back as the assistant's message; markdown renders.
    msg = ask(browser, ASK_SOFTMAX)
    assert opened.get_attribute("open") == "true"  # the next turn left the reader's choice alone
    assert msg.find_element(By.CSS_SELECTOR, ".thoughts").get_attribute("textContent").startswith("Subtract")
    content = msg.find_element(By.CLASS_NAME, "content")
    assert [li.text for li in content.find_elements(By.CSS_SELECTOR, "ol li")] == \
        ["m = max(x)", "e = exp(x - m)", "divide by sum(e)"]
    code = content.find_element(By.CSS_SELECTOR, "pre code")
    assert code.get_attribute("data-lang") == "python" and "def softmax(x):" in code.text
    assert content.find_element(By.TAG_NAME, "strong").text == "1"
    screenshot(browser, tmp_path / "chat-page-reasoning.png")
    if os.environ.get("MLA_CHAT_PAGE_SCREENSHOT"):  # the README's: taller, the last answer whole
        browser.set_window_size(1180, 1040)
        browser.execute_script("const m = document.getElementById('messages'); m.scrollTop = m.scrollHeight;")
        browser.save_screenshot(os.environ["MLA_CHAT_PAGE_SCREENSHOT"])
    assert page_errors(browser) == []


def test_model_markup_shows_as_text(browser, scripted):
    open_page(browser, scripted)
    msg = ask(browser, ASK_MARKUP)
    content = msg.find_element(By.CLASS_NAME, "content")
    text = content.text
    assert '<script>window.pwned = "script"</script>' in text
    assert "<img src=x onerror=\"window.pwned = 'img'\">" in text
    assert "[a trap](javascript:window.pwned=1)" in text  # not a link
    assert browser.execute_script("return window.pwned") is None
    thought = msg.find_element(By.CLASS_NAME, "thoughts")
    assert thought.get_attribute("textContent") == "They want <script>window.pwned = 'thought'</script> markup."
    assert msg.find_elements(By.CSS_SELECTOR, "script, img, b") == []
    links = content.find_elements(By.TAG_NAME, "a")
    assert [(a.text, a.get_attribute("href"), a.get_attribute("rel")) for a in links] == \
        [("the docs", "https://example.com/a_b", "noopener noreferrer nofollow")]
    assert content.find_element(By.CSS_SELECTOR, "p code").text == "<b>code</b>"
    assert content.find_element(By.CSS_SELECTOR, "pre code").text == '<script>window.pwned = "fence"</script>'
    # The stored conversation holds the model's text unchanged.
    assert stored_messages(browser)[-1]["content"].strip() == MARKUP
    assert page_errors(browser) == []
