#!/usr/bin/env python3
"""rilld's status page (GET /, server/status.html) in a real browser: Debian's chromium, headless,
driven through selenium's chromedriver. The test makes a session over HTTP, loads the page and
checks the session's row against GET /v1/sessions/NAME; registers a standing query, reads the
pushed answers on its own SSE stream and checks the page shows the same answers as they are
pushed (without reloading); checks that markup in a question stays text, that a refused or
failing /metrics leaves the page working ("metrics unavailable"), that the metrics it reads are
summarised right, that a vanished daemon is reported, and that with --http-tokens the page takes
?token= and shows only that owner's sessions. It saves a screenshot (in its temporary directory,
and in $RILL_SCREENSHOT_DIR when set) and checks that it is a real PNG with something drawn.

Usage: test_status_page.py RILL_BINARY SOURCE_DIR [TEST...]   (TEST: page, tokens; default all).
Needs selenium (the project's .venv), chromium and chromedriver (Debian: chromium,
chromium-driver) and the default model; exits 77 (skip) without them.
"""
import http.client
import json
import os
import queue
import shutil
import struct
import sys
import tempfile
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rilld_harness import Rilld, model_name, model_path, rilld_path, run_tests  # noqa: E402

try:
    from selenium import webdriver
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - reported as a skip
    webdriver = None

RILL, SRC = sys.argv[1], sys.argv[2]
ONLY = sys.argv[3:]
MODEL = model_path(SRC)
MODEL_NAME = model_name(MODEL)
RILLD = rilld_path(RILL)
CHROMIUM = os.environ.get("RILL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = (os.environ.get("RILL_CHROMEDRIVER") or shutil.which("chromedriver")
                or "/usr/bin/chromedriver")
FACTS = "The capital of France is Paris. The sky is blue. Bob is 42 years old.\n"
MORE = "Today is Bob's birthday: Bob is now 43 years old.\n"
QUESTION = "How old is Bob?"
OTHER_FACTS = "Meeting notes: the launch moves to Friday. Alice owns the release checklist.\n"
OTHER_QUESTION = "When is the launch?"
MARKUP = "<b>bold</b> & <i>what</i> is <script>x=1</script> here?"
ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789"  # 16..128 bytes
TOKENS = {"alice": ALICE, "bob": BOB}
WAIT_S = 90  # one engine thread on a shared machine: refreshes can queue behind each other


# ---- HTTP ------------------------------------------------------------------------------------

def daemon(tmp, *extra):
    return Rilld(RILLD, MODEL, os.path.join(tmp, "state"), *extra, http=True)


def call(d, method, path, body=None, token=None):
    host, port = d.http[len("http://"):].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    h = {"Authorization": "Bearer " + token} if token else {}
    data = json.dumps(body).encode() if body is not None else None
    if data is not None:
        h["Content-Type"] = "application/json"
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    text = r.read().decode("utf-8")
    c.close()
    ct = r.getheader("Content-Type") or ""
    return r.status, (json.loads(text) if ct.startswith("application/json") else text)


def ok(d, method, path, body=None, token=None, want=200):
    st, j = call(d, method, path, body, token)
    assert st == want, f"{method} {path} -> {st} {j}"
    return j


def settled(d, name, token=None):
    """The session's stats once everything acknowledged to it is evaluated."""
    deadline = time.time() + WAIT_S
    while time.time() < deadline:
        st = ok(d, "GET", f"/v1/sessions/{name}", token=token)
        if st["n_pending"] == 0:
            return st
        time.sleep(0.1)
    raise AssertionError(f"{name}: ingest did not settle: {st}")


class Events:
    """The test's own reader of GET /v1/sessions/NAME/events: standing events into a queue."""

    def __init__(self, d, name, token=None):
        host, port = d.http[len("http://"):].split(":")
        self.c = http.client.HTTPConnection(host, int(port), timeout=WAIT_S * 2)
        h = {"Authorization": "Bearer " + token} if token else {}
        self.c.request("GET", f"/v1/sessions/{name}/events", headers=h)
        self.r = self.c.getresponse()
        assert self.r.status == 200, (self.r.status, self.r.read())
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        kind, data = None, []
        try:
            for raw in self.r:
                line = raw.decode("utf-8").rstrip("\n")
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    data.append(line[6:])
                elif line == "":
                    if kind == "standing" and data:
                        self.q.put(json.loads("\n".join(data)))
                    kind, data = None, []
        except (OSError, ValueError, AttributeError):
            pass  # closed at the end of the test

    def standing(self, qid, min_version):
        """The first standing answer of qid that saw at least min_version of the data."""
        deadline = time.time() + WAIT_S
        while time.time() < deadline:
            try:
                e = self.q.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                break
            if e["qid"] == qid and e["version"] >= min_version:
                return e
        raise AssertionError(f"no standing answer of {qid} at version >= {min_version}")

    def close(self):
        self.c.close()


# ---- the browser -----------------------------------------------------------------------------

class Browser:
    """Headless chromium through chromedriver, 1000x700, its profile in the test's directory."""

    def __init__(self, tmp):
        o = Options()
        o.binary_location = CHROMIUM
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--window-size=1000,700", "--hide-scrollbars", "--force-color-profile=srgb",
                  f"--user-data-dir={os.path.join(tmp, 'chromium')}"):
            o.add_argument(a)
        o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.tmp = tmp
        self.d = webdriver.Chrome(options=o, service=Service(executable_path=CHROMEDRIVER,
                                                             log_output=os.path.join(
                                                                 tmp, "chromedriver.log")))
        self.d.set_page_load_timeout(60)
        # the window's size less chromium's frame is the page's: make the page itself 1000x700
        self.d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 1000, "height": 700, "deviceScaleFactor": 1,
                                "mobile": False})

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.d.quit()

    def until(self, what, fn, timeout=WAIT_S):
        """Waits for fn(driver) to be true; on timeout says what and shows the page's text."""
        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.1).until(lambda d: fn(d))
        except TimeoutException:
            self.d.save_screenshot(os.path.join(self.tmp, "timeout.png"))
            body = self.d.find_element(By.TAG_NAME, "body").text
            raise AssertionError(f"timed out waiting for {what}; the page says:\n{body}")

    def one(self, css):
        found = self.d.find_elements(By.CSS_SELECTOR, css)
        return found[0] if found else None

    # Read in one script each: the page replaces elements as it polls, so an element found in
    # one call may be gone by the next (a stale reference).
    def text(self, css):
        """The element's rendered text (no-break spaces as spaces, trimmed); None: no element."""
        t = self.d.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;", css)
        return t.replace("\u00a0", " ").strip() if t is not None else None

    def attr(self, css, name):
        return self.d.execute_script(
            "const e = document.querySelector(arguments[0]);"
            "return e ? e.getAttribute(arguments[1]) : null;", css, name)

    def script_errors(self):
        """The page's JavaScript errors so far (failed loads of refused routes are expected)."""
        return [e for e in self.d.get_log("browser")
                if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]]

    def screenshot(self, name):
        path = os.path.join(self.tmp, name)
        assert self.d.save_screenshot(path), "chromium took no screenshot"
        check_png(path, 1000, 700)
        out = os.environ.get("RILL_SCREENSHOT_DIR")
        if out:
            os.makedirs(out, exist_ok=True)
            shutil.copyfile(path, os.path.join(out, name))
        print(f"screenshot: {path}" + (f" and {os.path.join(out, name)}" if out else ""))
        return path


def check_png(path, want_w, want_h):
    """A well-formed PNG (signature, chunk CRCs, IHDR, IDAT that inflates to the image's size)
    of about the window's size, with many different rows: a page was drawn, not a blank."""
    b = open(path, "rb").read()
    assert b[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, idat, ihdr, end = 8, b"", None, False
    while pos + 12 <= len(b):
        n, kind = struct.unpack(">I4s", b[pos:pos + 8])
        data = b[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", b[pos + 8 + n:pos + 12 + n])
        assert zlib.crc32(kind + data) == crc, f"{path}: bad CRC in {kind}"
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", data)
        elif kind == b"IDAT":
            idat += data
        elif kind == b"IEND":
            end = True
        pos += 12 + n
    assert ihdr is not None and end, f"{path}: no IHDR or no IEND"
    w, h, depth, color = ihdr[:4]
    assert abs(w - want_w) <= 50 and h >= want_h * 0.8, f"{path}: {w}x{h}"
    assert depth == 8 and color in (2, 6), f"{path}: depth {depth}, color type {color}"
    stride = 1 + w * (3 if color == 2 else 4)
    raw = zlib.decompress(idat)
    assert len(raw) == h * stride, f"{path}: {len(raw)} bytes of pixels for {w}x{h}"
    rows = {raw[i * stride:(i + 1) * stride] for i in range(h)}
    assert len(rows) >= 60, f"{path}: only {len(rows)} different rows: nothing much drawn"


def session_row(name):
    return f'#sessions tr[data-session="{name}"]'


def standing_row(name, qid):
    return f'#standing tr[data-session="{name}"][data-qid="{qid}"]'


def col(row, c):
    return f'{row} td[data-col="{c}"]'


# ---- tests -----------------------------------------------------------------------------------

def t_page():
    """The session, its standing answers as they are pushed, escaping, metrics that fail or
    succeed, and a daemon that goes away."""
    with tempfile.TemporaryDirectory() as tmp, daemon(tmp) as d, Browser(tmp) as b:
        name = "status-demo"
        ok(d, "POST", "/v1/sessions", {"session": name}, want=201)
        ok(d, "POST", f"/v1/sessions/{name}/ingest", {"text": FACTS, "flush": True})
        st = settled(d, name)

        b.d.get(d.http + "/")
        row = session_row(name)
        b.until("the session's row", lambda _: b.attr(row, "data-version") == str(st["version"]))
        assert b.text(col(row, "session")) == name
        assert b.text(col(row, "model")) == st["model"] == MODEL_NAME
        assert b.text(col(row, "context")) == f"{st['n_resident']:,} / {st['window']:,}", \
            b.text(col(row, "context"))
        assert b.text(col(row, "seen")) == f"{st['n_seen']:,}"
        assert b.text(col(row, "pending")) == "0"
        assert b.text(col(row, "standing")) == "0"
        assert b.text("#sessions-count") == "(1)"
        assert MODEL_NAME in b.text("#models")
        assert "no standing queries" in b.text("#standing tbody")
        # /metrics answers or not (server.metrics may be missing from this build): either way
        # the page says something in its engine section and does not break
        b.until("the engine section",
                lambda _: b.one("#cards .card") is not None
                or "metrics unavailable" in (b.text("#metrics-note") or ""))
        b.d.execute_script("window.rillMarker = 42;")  # gone if the page reloads

        ev = Events(d, name)
        try:
            qid = ok(d, "POST", f"/v1/sessions/{name}/standing", {"question": QUESTION})["qid"]
            first = ev.standing(qid, st["version"])
            srow = standing_row(name, qid)
            b.until("the first standing answer",
                    lambda _: b.attr(srow, "data-version") == str(first["version"])
                    and b.text(col(srow, "answer")) == first["answer"].strip())
            assert b.text(col(srow, "question")) == QUESTION
            assert b.text(col(srow, "version")).startswith(f"v{first['version']}")
            listed = ok(d, "GET", f"/v1/sessions/{name}/standing")["standing"]
            assert [q["qid"] for q in listed] == [qid] and listed[0]["version"] >= first["version"]
            b.until("the session's live tag", lambda _: "live" in b.text(col(row, "standing")))

            # more data: the engine refreshes the query and pushes; the page follows
            v2 = ok(d, "POST", f"/v1/sessions/{name}/ingest", {"text": MORE, "flush": True})
            v2 = v2["version"]
            second = ev.standing(qid, v2)
            b.until("the pushed answer",
                    lambda _: b.attr(srow, "data-version") == str(second["version"])
                    and b.text(col(srow, "answer")) == second["answer"].strip())
            b.until("the new data version", lambda _: b.attr(row, "data-version") == str(v2))
            assert b.d.execute_script("return window.rillMarker;") == 42, "the page reloaded"

            # a second session with its own standing query: both followed, both rows right
            other = "status-notes"
            ok(d, "POST", "/v1/sessions", {"session": other}, want=201)
            ev_other = Events(d, other)
            try:
                ov = ok(d, "POST", f"/v1/sessions/{other}/ingest",
                        {"text": OTHER_FACTS, "flush": True})["version"]
                oq = ok(d, "POST", f"/v1/sessions/{other}/standing",
                        {"question": OTHER_QUESTION})["qid"]
                oa = ev_other.standing(oq, ov)
            finally:
                ev_other.close()
            orow = standing_row(other, oq)
            b.until("the second session's answer",
                    lambda _: b.text(col(orow, "answer")) == oa["answer"].strip()
                    and "live" in (b.text(col(session_row(other), "standing")) or ""))
            assert b.text("#sessions-count") == "(2)" and b.text("#standing-count") == "(2)"
            assert b.text(col(srow, "answer")) == second["answer"].strip()
            shot = b.screenshot("status_page.png")
            assert os.path.getsize(shot) > 10000, os.path.getsize(shot)

            # markup in a question is shown as text, never parsed
            qid2 = ok(d, "POST", f"/v1/sessions/{name}/standing", {"question": MARKUP})["qid"]
            row2 = standing_row(name, qid2)
            b.until("the second query's row", lambda _: b.one(row2) is not None)
            assert b.text(col(row2, "question")) == MARKUP
            assert b.d.find_elements(By.CSS_SELECTOR, "#standing b, #standing i, "
                                                      "#standing script") == []
            assert b.d.execute_script("return typeof x;") == "undefined"
            ev.standing(qid2, v2)  # let its refresh finish before it goes
            ok(d, "DELETE", f"/v1/sessions/{name}/standing/{qid2}")
            b.until("the unregistered query's row to go", lambda _: b.one(row2) is None)
            assert b.one(srow) is not None
        finally:
            ev.close()

        # the metrics summary, from a known text (the real one depends on what rilld counts)
        b.d.execute_script(r"""
          window.realFetch = window.fetch;
          window.fetch = (u, o) => String(u).startsWith('/metrics')
            ? Promise.resolve(new Response(arguments_text, {status: 200}))
            : window.realFetch(u, o);""".replace("arguments_text", json.dumps(
            "# TYPE rill_sessions gauge\n"
            'rill_sessions{model="m"} 3\n'
            'rill_requests_total{command="ask"} 7\nrill_requests_total{command="ingest"} 5\n'
            'rill_request_errors_total{command="ask"} 2\n'
            'rill_ttft_seconds_bucket{le="0.01"} 1\nrill_ttft_seconds_bucket{le="0.05"} 6\n'
            'rill_ttft_seconds_bucket{le="0.25"} 9\nrill_ttft_seconds_bucket{le="+Inf"} 10\n'
            "rill_ttft_seconds_sum 0.8\nrill_ttft_seconds_count 10\n"
            'rill_tokens_total{model="m",class="ingest"} 40\n'
            'rill_tokens_total{model="m",class="decode"} 2\n'
            'rill_kv_pages_capacity{model="m"} 100\nrill_kv_pages_used{model="m"} 12\n'
            'rill_kv_pages_reserved{model="m"} 30\nrill_kv_pages_free{model="m"} 88\n')))

        def card(m):
            return b.text(f'#cards .card[data-metric="{m}"]') or ""
        b.until("the metrics cards", lambda _: card("requests").startswith("requests\n12\n"))
        assert card("sessions") == "sessions\n3\nopen", card("sessions")
        assert card("requests") == "requests\n12\n2 errors", card("requests")
        assert card("ttft").startswith("time to first token\np50 \u2264 50 ms\np99 \u2264 \u221e"), \
            card("ttft")
        assert "mean 80 ms" in card("ttft") and "10 asks" in card("ttft"), card("ttft")
        assert card("tokens") == "tokens evaluated\n42\ningest 40 \u00b7 decode 2", card("tokens")
        assert card("kv") == "KV pages\n12 / 100\nreserved 30 \u00b7 free 88", card("kv")
        assert b.one('#cards .card[data-metric="spec"]') is None  # absent series: no card

        # /metrics refused, then unreachable: the page says so and keeps following sessions
        for answer, said in (("Promise.resolve(new Response('{\"error\": {\"message\": "
                              "\"unknown command\"}}', {status: 400, headers: "
                              "{'Content-Type': 'application/json'}}))",
                              "metrics unavailable (HTTP 400: unknown command)"),
                             ("Promise.reject(new TypeError('Failed to fetch'))",
                              "metrics unavailable (Failed to fetch)")):
            b.d.execute_script("window.fetch = (u, o) => String(u).startsWith('/metrics') ? "
                               + answer + " : window.realFetch(u, o);")
            b.until(said, lambda _: b.text("#metrics-note") == said)
            assert b.one("#cards .card") is None
        v3 = ok(d, "POST", f"/v1/sessions/{name}/ingest", {"text": "The end.\n", "flush": True})
        b.until("the session's version after metrics failed",
                lambda _: b.attr(row, "data-version") == str(v3["version"]))
        errors = b.script_errors()
        assert errors == [], errors

        # the session closed, then the daemon gone
        ok(d, "DELETE", f"/v1/sessions/{name}")
        b.until("the closed session's rows to go",
                lambda _: b.one(row) is None and b.one(srow) is None)
        assert b.one(orow) is not None and b.text("#sessions-count") == "(1)"
        ok(d, "DELETE", f"/v1/sessions/{other}")
        b.until("no sessions", lambda _: "no sessions yet" in b.text("#sessions tbody"))
        assert "no standing queries" in b.text("#standing tbody")
        d.kill()
        b.until("the daemon reported gone", lambda _: "rilld unreachable" in b.text("#conn"))
        assert b.attr("#conn", "class") == "down"


def t_tokens():
    """With --http-tokens: / and its routes want a token; ?token= on the page gives one, the
    page shows that owner's sessions only and follows their standing answers live."""
    with tempfile.TemporaryDirectory() as tmp:
        tokens = os.path.join(tmp, "tokens")
        with open(tokens, "w") as f:
            f.write(f"{ALICE} alice\n{BOB} bob\n")
        with daemon(tmp, "--http-tokens", tokens) as d, Browser(tmp) as b:
            for who in ("alice", "bob"):
                ok(d, "POST", "/v1/sessions", {"session": f"{who}-s"}, token=TOKENS[who],
                   want=201)
            ok(d, "POST", "/v1/sessions/alice-s/ingest", {"text": FACTS, "flush": True},
               token=ALICE)
            st = settled(d, "alice-s", token=ALICE)
            status, _ = call(d, "GET", "/")
            assert status == 401, status

            b.d.get(d.http + "/?token=" + ALICE)
            row = session_row("alice-s")
            b.until("alice's session", lambda _: b.attr(row, "data-version") == str(st["version"]))
            assert b.one(session_row("bob-s")) is None
            assert b.text("#sessions-count") == "(1)"
            ev = Events(d, "alice-s", token=ALICE)
            try:
                qid = ok(d, "POST", "/v1/sessions/alice-s/standing", {"question": QUESTION},
                         token=ALICE)["qid"]
                first = ev.standing(qid, st["version"])
                srow = standing_row("alice-s", qid)
                b.until("alice's standing answer",
                        lambda _: b.text(col(srow, "answer")) == first["answer"].strip())
                b.until("the live tag", lambda _: "live" in b.text(col(row, "standing")))
            finally:
                ev.close()
            b.screenshot("status_page_tokens.png")

            status, _ = call(d, "GET", "/?token=" + "x" * 20)
            assert status == 401, status
            b.d.get(d.http + "/?token=" + BOB)
            b.until("bob's session", lambda _: b.one(session_row("bob-s")) is not None)
            assert b.one(row) is None
            assert "no standing queries" in b.text("#standing tbody")
            errors = b.script_errors()
            assert errors == [], errors


def main():
    if webdriver is None:
        print("SKIP: selenium is not installed (the project's .venv: scripts/setup.sh)")
        return 77
    for what, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER),
                       ("the default model", MODEL)):
        if not os.path.exists(path):
            print(f"SKIP: {what} is missing ({path})")
            return 77
    return run_tests({"page": t_page, "tokens": t_tokens}, ONLY)


if __name__ == "__main__":
    sys.exit(main())
