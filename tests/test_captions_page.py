#!/usr/bin/env python3
"""rilld's captions page (GET /captions/NAME, server/captions.html) in a real browser: Debian's
chromium, headless, through selenium's chromedriver. A translation session (whisper-tiny.en and
the tiny qwen2 model with wait-2, so words come before sentences end; its Spanish is noise, the
mechanics are what is checked) is fed a two-sentence espeak-ng clip at real time over ZeroMQ
while the page is open: the page loads and goes live, captions appear and then grow in place
(each state the page shows extends the one before), the tentative tail is styled apart from
the committed text, the latency is shown, and at the end the page's text equals what the engine published (the transcript events'
committed deltas joined, the translation events' words joined). A screenshot is saved (in the
temporary directory, and in $RILL_SCREENSHOT_DIR when set) and checked to be a real PNG. The
session is created over HTTP (POST /v1/sessions with translate), the audio sent over ZeroMQ.
$RILL_CAPTIONS_MODEL replaces the language model (docs/captions_page.png was taken with
qwen2.5-coder-0.5b-instruct, whose Spanish is readable) and $RILL_CAPTIONS_POLICY the policy.

Usage: test_captions_page.py RILL_BINARY SOURCE_DIR. Exits 77 (skip) without selenium, pyzmq
(.venv), chromium, chromedriver, espeak-ng, whisper-tiny.en or the tiny models.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_server as ts  # noqa: E402
import test_status_page as sp  # noqa: E402  (its Browser and PNG check)
from rilld_harness import Rilld, rilld_path  # noqa: E402

RILL, SRC = sys.argv[1], sys.argv[2]
WHISPER = os.path.join(SRC, "models", "whisper-tiny.en.gguf")
QWEN = os.environ.get("RILL_CAPTIONS_MODEL") or os.path.join(
    SRC, "tests", "data", "models", "rill-tiny-qwen2-F32.gguf")
POLICY = os.environ.get("RILL_CAPTIONS_POLICY") or "wait-2"
SPEECH = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."
PACKET_S = 0.1


def clip_packets(tmp):
    path = os.path.join(tmp, "two.wav")
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", path, SPEECH], check=True)
    w = wave.open(path)
    rate = w.getframerate()
    raw = w.readframes(w.getnframes())
    step = int(rate * PACKET_S) * 2
    return rate, [raw[i:i + step] for i in range(0, len(raw), step)]


def page_state(b):
    return b.d.execute_script(
        "return {caps: window.captionsText ? window.captionsText() : null,"
        " committed: document.getElementById('committed').textContent,"
        " tentative: document.getElementById('tentative').textContent,"
        " latency: document.getElementById('latency').textContent,"
        " conn: document.getElementById('conn').textContent};")


def t_captions():
    with tempfile.TemporaryDirectory() as tmp:
        rate, packets = clip_packets(tmp)
        d = Rilld(rilld_path(RILL), f"llm={QWEN}", os.path.join(tmp, "state"), "--model",
                  f"asr={WHISPER}", http=True, threads=2)
        try:
            d.start()
            c = ts.Client(d)
            sub = ts.Sub(d, "talk/transcript", "talk/translation")
            time.sleep(0.3)
            args = dict(session="talk", model="llm", asr="asr", translate=POLICY)
            if not os.environ.get("RILL_CAPTIONS_MODEL"):
                args["system"] = "Translate into Spanish."  # the tiny context: a short one
            # over the HTTP door, as a browser-side client would make it
            status, body = sp.call(d, "POST", "/v1/sessions", args)
            assert status == 201 and body == {"session": "talk", "model": "llm", "asr": "asr",
                                              "translate": POLICY}, (status, body)
            with sp.Browser(tmp) as b:
                b.d.get(d.http + "/captions/talk")
                b.until("the stream", lambda _: page_state(b)["conn"] == "live")
                assert b.text("#session") == "talk"
                # every state the captions pass through, recorded by the browser itself (the
                # emissions of a fast model can come within one poll of the test)
                b.d.execute_script(
                    "window.__caps = [];"
                    "new MutationObserver(() => { const t = window.captionsText();"
                    " if (t && window.__caps[window.__caps.length - 1] !== t)"
                    " window.__caps.push(t); }).observe(document.getElementById('captions'),"
                    " {childList: true, subtree: true, characterData: true});"
                    "window.__tent = false;"
                    "new MutationObserver(() => { if (document.getElementById('tentative')"
                    ".textContent !== '') window.__tent = true; })"
                    ".observe(document.getElementById('tentative'),"
                    " {childList: true, subtree: true, characterData: true});")
                t0 = time.time()
                for i, data in enumerate(packets):
                    r = c.req("ingest.audio", dict(session="talk", codec="pcm16", rate=rate,
                                                   channels=1, seq=i, data=data))
                    assert r["status"] == "OK", r
                    time.sleep(max(0.0, t0 + (i + 1) * PACKET_S - time.time()))
                c.call("ingest.audio", session="talk", flush=True)
                # the engine's records: every transcript update, then the whole translation
                sub.drain(240, until=lambda ev: any(t == "talk/transcript" and e["final"]
                                                    for t, e in ev))
                n_words = len(re.findall(r"[^ \t\n\r\v\f]+", "".join(
                    e["committed"] for e in sub.of("talk/transcript"))))
                deadline = time.time() + 240
                while time.time() < deadline:
                    tr = c.call("session.stats", session="talk")["translation"]
                    sub.drain(0.3)
                    evs = sub.of("talk/translation")
                    if tr["queued_bytes"] == 0 and len(evs) == tr["emissions"] and evs and \
                            evs[-1]["src_words"] == n_words and evs[-1]["segment_end"]:
                        break
                for e in sub.of("talk/transcript"):
                    print(f"transcript {e['audio_s']} s: {e['committed']!r} | {e['tentative']!r}")
                for e in sub.of("talk/translation"):
                    print(f"translation at {e['src_s']} s, {e['src_words']} words: {e['emit']!r}")
                committed = "".join(e["committed"] for e in sub.of("talk/transcript")).lstrip()
                captions = " ".join(e["emit"] for e in sub.of("talk/translation"))
                assert captions, "nothing was translated"
                b.until("the last caption", lambda _: page_state(b)["caps"] == captions, 60)
                st = page_state(b)
                assert st["committed"] == committed, (st, committed)
                assert st["tentative"] == "", st  # the flush committed the tail
                assert re.fullmatch(r"\d+\.\d s", st["latency"]), st
                # captions appeared and grew in place (each state extends the one before)
                seen = b.d.execute_script("return window.__caps")
                print(f"captions as they arrived: {seen}")
                assert len(seen) >= 2, (seen, captions)
                for a, b2 in zip(seen, seen[1:] + [captions]):
                    assert b2.startswith(a), (a, b2)
                # the tentative tail is styled apart from the committed text
                style = b.d.execute_script(
                    "const a = getComputedStyle(document.getElementById('committed'));"
                    "const b = getComputedStyle(document.getElementById('tentative'));"
                    "return [a.color, b.color, b.fontStyle];")
                assert style[0] != style[1] and style[2] == "italic", style
                if any(e["tentative"] for e in sub.of("talk/transcript")):
                    assert b.d.execute_script("return window.__tent"), "no tentative text shown"
                # markup in words stays text: the page put no element inside a caption
                assert b.d.execute_script(
                    "return document.querySelectorAll('#captions .emit *').length") == 0
                b.screenshot("captions_page.png")
                assert b.script_errors() == [], b.script_errors()
                # a malformed name is not a page
                status, _ = sp.call(d, "GET", "/captions/bad%20name")
                assert status == 404, status
                status, _ = sp.call(d, "POST", "/captions/talk", {})
                assert status == 405, status
            c.call("session.close", session="talk")
            sub.close()
            c.close()
            assert d.stop() == 0, d.log()
        finally:
            d.kill()


def main():
    if sp.webdriver is None or ts.zmq is None:
        print("SKIP: selenium, pyzmq and msgpack are needed (the project's .venv)")
        return 77
    for need in (sp.CHROMIUM, sp.CHROMEDRIVER, WHISPER, QWEN):
        if not os.path.exists(need):
            print(f"SKIP: {need} is missing")
            return 77
    if shutil.which("espeak-ng") is None:
        print("SKIP: espeak-ng is missing")
        return 77
    ts.CTX = ts.zmq.Context()
    try:
        t_captions()
    except AssertionError as e:
        print(f"FAIL captions: {e}")
        return 1
    finally:
        ts.CTX.destroy(0)
    print("ok   captions\n1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
