#!/usr/bin/env python3
"""rilld's HTTP front door (docs/protocol.md, HTTP; ../shared/INTERFACES.md is the contract), as
its users drive it: rill's own routes with JSON and server-sent events, the OpenAI-compatible API
through the official `openai` package, curl, bearer tokens and ownership, and hostile HTTP.

Usage: test_http.py RILL_BINARY SOURCE_DIR [TEST...]   (TEST: routes, events, openai, curl,
tokens, both_doors, hostile, stop; default all). Each test starts its own daemon on free loopback
ports. Needs the project's .venv (openai, pyzmq, msgpack) and the default model; exits 77 (skip) without them.
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rilld_harness import (Rilld, keygen, model_name, model_path, rilld_path,  # noqa: E402
                           run_tests)

try:
    import msgpack
    import openai
    import zmq
except ImportError:  # pragma: no cover - reported as a skip
    openai = zmq = msgpack = None

RILL, SRC = sys.argv[1], sys.argv[2]
ONLY = sys.argv[3:]
MODEL = model_path(SRC)
MODEL_NAME = model_name(MODEL)
RILLD = rilld_path(RILL)
FACTS = "The capital of France is Paris. The sky is blue. Bob is 42 years old.\n"


def daemon(tmp, *extra, **kw):
    return Rilld(RILLD, MODEL, os.path.join(tmp, "state"), *extra, http=True, **kw)


def call(d, method, path, body=None, token=None, raw=None, headers=None):
    """One request on a fresh connection: (status, parsed JSON or text, headers)."""
    host, port = d.http[len("http://"):].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    if data is not None:
        h.setdefault("Content-Type", "application/json")
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    text = r.read().decode("utf-8")
    c.close()
    ct = r.getheader("Content-Type") or ""
    return r.status, (json.loads(text) if ct.startswith("application/json") else text), r


def ok(d, method, path, body=None, token=None, want=200):
    st, j, _ = call(d, method, path, body, token)
    assert st == want, f"{method} {path} -> {st} {j}"
    return j


def error_of(d, method, path, body=None, token=None, raw=None, headers=None):
    st, j, _ = call(d, method, path, body, token, raw, headers)
    assert st >= 400, f"{method} {path}: wanted an error, got {st} {j}"
    e = j["error"]
    assert set(e) == {"message", "type", "code"} and e["message"], j
    return st, e


class Sse:
    """A server-sent-events reader on its own connection (http.client, line by line)."""

    def __init__(self, d, method, path, body=None, headers=None, token=None):
        host, port = d.http[len("http://"):].split(":")
        self.c = http.client.HTTPConnection(host, int(port), timeout=60)
        h = dict(headers or {})
        if token:
            h["Authorization"] = "Bearer " + token
        data = json.dumps(body).encode() if body is not None else None
        self.c.request(method, path, body=data, headers=h)
        self.r = self.c.getresponse()
        assert self.r.status == 200, (self.r.status, self.r.read())
        assert self.r.getheader("Content-Type").startswith("text/event-stream")

    def next(self):
        """The next event as (kind, id, data) - kind None for a data-only event; comments are
        skipped. None at the end of the stream."""
        kind = eid = None
        data = []
        while True:
            line = self.r.readline()
            if not line:
                return None
            line = line.decode("utf-8").rstrip("\n")
            if line == "":
                if data:
                    return kind, eid, "\n".join(data)
                kind = eid = None
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(": ")
            if field == "event":
                kind = value
            elif field == "id":
                eid = value
            elif field == "data":
                data.append(value)

    def close(self):
        self.c.close()


def zmq_ask(d, session, question, max_tokens):
    """The same ask over the ZeroMQ door (docs/protocol.md), for comparing the two doors."""
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(d.req_ep)
    s.send(msgpack.packb({"v": 1, "id": 7, "cmd": "ask",
                          "args": {"session": session, "question": question,
                                   "max_tokens": max_tokens}}))
    assert s.poll(60000), "no ZeroMQ reply"
    rep = msgpack.unpackb(s.recv(), raw=False)
    s.close()
    assert rep["status"] == "OK", rep
    return rep["result"]


def zmq_stats(d):
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(d.req_ep)
    s.send(msgpack.packb({"v": 1, "id": 8, "cmd": "server.stats"}))
    assert s.poll(60000), "no ZeroMQ reply"
    rep = msgpack.unpackb(s.recv(), raw=False)
    s.close()
    return rep["result"]


# ---- tests -------------------------------------------------------------------------------------

def t_routes():
    """Every rill route maps to its command and gives its result; errors are OpenAI's object
    with the rill_err_t name as code and the right status; nothing changes on an error."""
    with tempfile.TemporaryDirectory() as tmp, daemon(tmp) as d:
        assert ok(d, "GET", "/v1/sessions") == {"sessions": []}
        r = ok(d, "POST", "/v1/sessions", {"session": "a", "window": 512}, want=201)
        assert r["session"] == "a" and r["model"] == MODEL_NAME, r
        st, e = error_of(d, "POST", "/v1/sessions", {"session": "a"})
        assert st == 409 and e["code"] == "EEXIST", (st, e)
        v = ok(d, "POST", "/v1/sessions/a/ingest", {"text": FACTS, "flush": True})
        assert v["version"] == 1, v
        t = ok(d, "POST", "/v1/sessions/a/ingest",
               {"ticks": [{"symbol": "AAPL", "ts": 1, "price": 187.5, "size": 100,
                           "side": "B"}]})
        assert t["version"] == 2 and t["accepted"] == 1 and t["lines"] == 1, t
        stats = ok(d, "GET", "/v1/sessions/a")
        assert stats["version"] == 2 and stats["window"] == 512 and stats["model"] == MODEL_NAME
        a = ok(d, "POST", "/v1/sessions/a/ask", {"question": "How old is Bob?", "max_tokens": 12})
        assert a["answer"] and a["version"] == 2 and a["tokens"] >= 1, a
        # the same question over ZeroMQ gets the same (greedy) answer: one command layer
        z = zmq_ask(d, "a", "How old is Bob?", 12)
        assert z["answer"] == a["answer"], (z, a)
        assert a["consistency"] == "acknowledged", a
        e = ok(d, "POST", "/v1/sessions/a/ask", {"question": "How old is Bob?", "max_tokens": 12,
                                                 "consistency": "evaluated"})
        # nothing queued: the same context, so the same answer
        assert e["consistency"] == "evaluated" and e["answer"] == a["answer"], (e, a)
        assert e["version"] == 2 and e["backlog"] == 0, e
        q = ok(d, "POST", "/v1/sessions/a/standing", {"question": "What is the capital of France?",
                                                      "max_tokens": 8})
        lst = ok(d, "GET", "/v1/sessions/a/standing")["standing"]
        assert [x["qid"] for x in lst] == [q["qid"]], lst
        assert ok(d, "DELETE", f"/v1/sessions/a/standing/{q['qid']}") == {}
        assert ok(d, "GET", "/v1/sessions/a/standing") == {"standing": []}
        snap = ok(d, "POST", "/v1/sessions/a/snapshot")
        assert snap["path"].endswith(".snap"), snap
        rep = ok(d, "POST", "/v1/sessions/a/replace", {"from_version": 2, "text": ""})
        assert rep["version"] >= 2, rep
        # errors: status, type and code; the session is unchanged by each
        before = ok(d, "GET", "/v1/sessions/a")
        cases = [
            ("GET", "/v1/sessions/nope", None, 404, "ENOTFOUND"),
            ("POST", "/v1/sessions/a/ask", {"question": ""}, 400, "EINVAL"),
            ("POST", "/v1/sessions/a/ask", {"question": "x", "max_tokens": 99999}, 400, "ERANGE"),
            ("POST", "/v1/sessions/a/ask", {"question": "x", "bogus": 1}, 400, "EINVAL"),
            ("POST", "/v1/sessions/a/ask", {"question": 5}, 400, "EFORMAT"),
            ("POST", "/v1/sessions/a/ask", {"question": "x", "consistency": "strong"}, 400,
             "EINVAL"),
            ("POST", "/v1/sessions/a/ask", {"question": "x", "session": "b"}, 400, "EINVAL"),
            ("POST", "/v1/sessions/a/ingest", {"text": "x", "ticks": []}, 400, "EINVAL"),
            ("POST", "/v1/sessions/a/ingest", {}, 400, "EINVAL"),
            ("PUT", "/v1/sessions/a", {}, 405, "EINVAL"),
            ("GET", "/v1/nothing", None, 404, "ENOTFOUND"),
            ("GET", "/v1/sessions/bad name", None, 404, "ENOTFOUND"),
            ("DELETE", "/v1/sessions/a/standing/12345", None, 404, "ENOTFOUND"),
        ]
        for method, path, body, status, code in cases:
            st, e = error_of(d, method, path.replace(" ", "%20"), body)
            assert (st, e["code"]) == (status, code), (method, path, body, st, e)
            assert e["type"] == ("not_found_error" if st == 404 else "invalid_request_error")
        assert ok(d, "GET", "/v1/sessions/a") == before
        assert ok(d, "DELETE", "/v1/sessions/a") == {}
        assert ok(d, "GET", "/v1/sessions") == {"sessions": []}
        assert d.alive()


def t_events():
    """An ask streamed as SSE (token pieces that add up to the answer, then the answer event);
    a session's event stream; Last-Event-ID resumes after an event in the replay buffer and
    reports a gap for one that fell out of it; a closed session ends its streams."""
    with tempfile.TemporaryDirectory() as tmp, daemon(tmp, "--http-replay", "4") as d:
        ok(d, "POST", "/v1/sessions", {"session": "e"}, want=201)
        ok(d, "POST", "/v1/sessions/e/ingest", {"text": FACTS, "flush": True})
        s = Sse(d, "POST", "/v1/sessions/e/ask",
                {"question": "What color is the sky?", "max_tokens": 10, "stream": True})
        pieces = []
        while True:
            ev = s.next()
            assert ev is not None, "stream ended before the answer"
            kind, _, data = ev
            if kind == "token":
                pieces.append(json.loads(data)["piece"])
            else:
                assert kind == "answer", ev
                answer = json.loads(data)
                break
        assert s.next() is None  # the stream ends after the answer
        s.close()
        assert pieces and "".join(pieces).strip() == answer["answer"], (pieces, answer)
        # an unknown session is a plain 404, not a stream
        st, e = error_of(d, "POST", "/v1/sessions/zz/ask", {"question": "x", "stream": True})
        assert st == 404, (st, e)
        # the session's events: a standing query's pushes
        ev = Sse(d, "GET", "/v1/sessions/e/events")
        ok(d, "POST", "/v1/sessions/e/standing", {"question": "How old is Bob?", "max_tokens": 6})
        seen = []
        for i in range(3):
            if i > 0:
                ok(d, "POST", "/v1/sessions/e/ingest", {"text": f"Line {i}.\n", "flush": True})
            while True:
                kind, eid, data = ev.next()
                if kind == "standing":
                    break
            m = json.loads(data)
            assert eid == f"e/standing:{m['seq']}" and m["session"] == "e", (eid, m)
            seen.append((eid, m))
        ev.close()
        assert [m["seq"] for _, m in seen] == sorted(m["seq"] for _, m in seen)
        # resume after the first of them: the later ones come again, in order
        r = Sse(d, "GET", "/v1/sessions/e/events", headers={"Last-Event-ID": seen[0][0]})
        again = []
        while len(again) < 2:
            kind, eid, data = r.next()
            if kind == "standing":
                again.append(eid)
        assert again == [seen[1][0], seen[2][0]], (again, seen)
        r.close()
        # one that fell out of the 4-event buffer: a gap event first
        for i in range(4):
            ok(d, "POST", "/v1/sessions/e/ask", {"question": "Hi?", "max_tokens": 3})
        g = Sse(d, "GET", "/v1/sessions/e/events", headers={"Last-Event-ID": seen[0][0]})
        kind, _, data = g.next()
        assert kind == "gap" and json.loads(data)["last_event_id"] == seen[0][0], (kind, data)
        # closing the session ends the stream with a closed event
        ok(d, "DELETE", "/v1/sessions/e")
        deadline = time.time() + 10
        kinds = []
        while time.time() < deadline:
            ev = g.next()
            if ev is None:
                break
            kinds.append(ev[0])
        assert "closed" in kinds, kinds
        g.close()
        # SIGTERM with a stream open: rilld ends it and stops cleanly
        ok(d, "POST", "/v1/sessions", {"session": "f"}, want=201)
        f = Sse(d, "GET", "/v1/sessions/f/events")
        assert d.stop() == 0, d.log()
        while f.next() is not None:
            pass
        f.close()
        assert "suspended" not in d.log() and "rilld: http:" not in d.log(), d.log()


def t_openai():
    """The official openai package against rilld: models, completions and chat completions,
    plain and streamed, usage, seeds, stop strings, and its error classes."""
    with tempfile.TemporaryDirectory() as tmp, daemon(tmp) as d:
        c = openai.OpenAI(base_url=d.http + "/v1", api_key="unused", max_retries=0, timeout=60)
        ids = [m.id for m in c.models.list()]
        assert ids == [MODEL_NAME], ids
        # greedy chat equals an ask on a session with the same system prompt and no data: both
        # render the same template over the same tokens
        system = "You answer in one short sentence."
        r = c.chat.completions.create(model=MODEL_NAME, temperature=0, max_tokens=16,
                                      messages=[{"role": "system", "content": system},
                                                {"role": "user", "content": "What is 2+2?"}])
        text = r.choices[0].message.content
        assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
        assert r.usage.prompt_tokens > 5 and 1 <= r.usage.completion_tokens <= 16, r.usage
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
        assert r.choices[0].finish_reason in ("stop", "length"), r
        ok(d, "POST", "/v1/sessions", {"session": "ref", "system": system}, want=201)
        ref = ok(d, "POST", "/v1/sessions/ref/ask", {"question": "What is 2+2?",
                                                      "max_tokens": 16})
        assert ref["answer"] == text.strip(), (ref, text)
        # streamed chat: the deltas add up to the same text, the last chunk has the reason
        chunks = list(c.chat.completions.create(
            model=MODEL_NAME, temperature=0, max_tokens=16, stream=True,
            messages=[{"role": "system", "content": system},
                      {"role": "user", "content": "What is 2+2?"}]))
        streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        assert streamed == text, (streamed, text)
        assert chunks[-1].choices[0].finish_reason in ("stop", "length")
        # plain completion, length-limited, and a stop string that ends it
        p = c.completions.create(model=MODEL_NAME, prompt="One, two, three, four,",
                                 max_tokens=8, temperature=0)
        full = p.choices[0].text
        assert p.choices[0].finish_reason == "length" and p.usage.completion_tokens == 8, p
        stop = full.strip()[:3]
        assert stop, full
        q = c.completions.create(model=MODEL_NAME, prompt="One, two, three, four,",
                                 max_tokens=8, temperature=0, stop=[stop])
        assert q.choices[0].text == full[:full.index(stop)], (q.choices[0].text, full, stop)
        assert q.choices[0].finish_reason == "stop"
        sq = "".join(ch.choices[0].text for ch in c.completions.create(
            model=MODEL_NAME, prompt="One, two, three, four,", max_tokens=8, temperature=0,
            stop=[stop], stream=True) if ch.choices)
        assert sq == q.choices[0].text, (sq, q.choices[0].text)
        # sampling: a seed repeats, other seeds differ somewhere
        def sample(seed):
            return c.completions.create(model=MODEL_NAME, prompt="Once upon a time",
                                        max_tokens=12, temperature=1.2, seed=seed).choices[0].text
        a1, a2 = sample(11), sample(11)
        assert a1 == a2, (a1, a2)
        assert len({sample(s) for s in range(20, 26)} | {a1}) > 1
        # errors as the package raises them
        for kwargs, cls in [({"model": "nope"}, openai.NotFoundError),
                            ({"n": 2}, openai.BadRequestError),
                            ({"temperature": 7}, openai.BadRequestError),
                            ({"max_tokens": 5000}, openai.BadRequestError)]:
            args = {"model": MODEL_NAME, "prompt": "x", "max_tokens": 4, **kwargs}
            try:
                c.completions.create(**args)
                raise AssertionError(f"{kwargs}: no error")
            except cls as e:
                assert e.body and e.body.get("code"), e.body
        try:
            c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "robot",
                                                                    "content": "x"}])
            raise AssertionError("a bad role was accepted")
        except openai.BadRequestError:
            pass
        assert d.alive()


def t_budget():
    """Shared prompts of completions reserve KV like sessions: with the budget full of
    sessions but one, completions with ever new system prompts still run (the idle shared
    prompt gives its reservation back), a client's session takes the place of an idle shared
    prompt, and a full budget is a 429 that says so. The sessions are pinned awake: unpinned
    ones would sleep to make room (test_server.py sleep) and the budget would never be full."""
    with tempfile.TemporaryDirectory() as tmp, daemon(tmp, "--window", "256", "--sinks", "16",
                                                      kv_cells=2048) as d:
        n = 0
        while True:
            st, j, _ = call(d, "POST", "/v1/sessions", {"session": f"s{n}", "pin": True})
            if st != 201:
                assert st == 429 and j["error"]["code"] == "EFULL", (st, j)
                assert "KV budget" in j["error"]["message"], j
                break
            n += 1
        assert n >= 2, n
        ok(d, "DELETE", "/v1/sessions/s0")
        for who in ["A", "B", "C"]:
            ok(d, "POST", "/v1/chat/completions",
               {"messages": [{"role": "system", "content": "You are " + who + "."},
                             {"role": "user", "content": "Hi"}], "max_tokens": 3})
        # the last slot is an idle shared prompt's now: a client's session takes it back
        ok(d, "POST", "/v1/sessions", {"session": "late", "pin": True}, want=201)
        st, j, _ = call(d, "POST", "/v1/sessions", {"session": "later", "pin": True})
        assert st == 429, (st, j)


def t_curl():
    """curl, as people try a server first."""
    with tempfile.TemporaryDirectory() as tmp, daemon(tmp) as d:
        def curl(*args):
            out = subprocess.run(["curl", "-sS", "-w", "\n%{http_code}", *args],
                                 capture_output=True, text=True, timeout=60, check=True).stdout
            body, _, code = out.rpartition("\n")
            return int(code), body
        code, body = curl("-X", "POST", d.http + "/v1/sessions", "-d", '{"session":"c"}')
        assert code == 201 and json.loads(body)["session"] == "c", (code, body)
        code, body = curl("-X", "POST", d.http + "/v1/sessions/c/ingest", "-H",
                          "Content-Type: application/json", "-d", json.dumps({"text": FACTS}))
        assert code == 200 and json.loads(body)["version"] == 1, (code, body)
        code, body = curl("-N", "-X", "POST", d.http + "/v1/sessions/c/ask", "-d",
                          '{"question":"How old is Bob?","max_tokens":6,"stream":true}')
        assert code == 200 and "event: token" in body and "event: answer" in body, body
        code, body = curl(d.http + "/v1/chat/completions", "-d", json.dumps(
            {"model": MODEL_NAME, "max_tokens": 4, "stream": True,
             "messages": [{"role": "user", "content": "Hi"}]}))
        assert code == 200 and body.rstrip().endswith("data: [DONE]"), body
        code, body = curl(d.http + "/")
        assert code == 200 and "<title>rilld</title>" in body, body[:200]
        code, body = curl(d.http + "/v1/models")
        assert code == 200 and json.loads(body)["data"][0]["id"] == MODEL_NAME


def t_tokens():
    """--http-tokens: a token's sessions are its own (403 for others'), no token is 401, bad
    tokens files and non-loopback binds without tokens are refused at start."""
    with tempfile.TemporaryDirectory() as tmp:
        tf = os.path.join(tmp, "tokens")
        with open(tf, "w") as f:
            f.write("# rilld HTTP tokens\nalice-token-0123456789 alice\n"
                    "bob-token-0123456789abc bob\n\n")
        with daemon(tmp, "--http-tokens", tf) as d:
            A, B = "alice-token-0123456789", "bob-token-0123456789abc"
            st, e = error_of(d, "GET", "/v1/sessions")
            assert st == 401 and e["type"] == "authentication_error", (st, e)
            st, e = error_of(d, "GET", "/v1/sessions", token="wrong-token-0123456789")
            assert st == 401, st
            ok(d, "POST", "/v1/sessions", {"session": "mine"}, token=A, want=201)
            ok(d, "POST", "/v1/sessions/mine/ingest", {"text": FACTS}, token=A)
            for method, path, body in [("GET", "/v1/sessions/mine", None),
                                       ("POST", "/v1/sessions/mine/ask", {"question": "x"}),
                                       ("POST", "/v1/sessions/mine/ingest", {"text": "y"}),
                                       ("GET", "/v1/sessions/mine/events", None),
                                       ("DELETE", "/v1/sessions/mine", None)]:
                st, e = error_of(d, method, path, body, token=B)
                assert st == 403 and e["type"] == "permission_error", (method, path, st, e)
            assert ok(d, "GET", "/v1/sessions", token=B) == {"sessions": []}
            assert ok(d, "GET", "/v1/sessions", token=A) == {"sessions": ["mine"]}
            assert ok(d, "GET", "/v1/sessions/mine", token=A)["version"] == 1
            # ?token= works too (a browser's EventSource cannot send headers)
            st, j, _ = call(d, "GET", "/v1/sessions?token=" + A)
            assert st == 200 and j == {"sessions": ["mine"]}, (st, j)
        # refusals at start: a malformed tokens file, a public address without tokens
        bad = os.path.join(tmp, "bad")
        with open(bad, "w") as f:
            f.write("short alice\n")
        d = Rilld(RILLD, MODEL, os.path.join(tmp, "s2"), "--http-tokens", bad, http=True)
        d.start(expect_exit=True)
        assert d.proc.wait(30) != 0 and "line 1: token shorter than 16 bytes" in d.log(), d.log()
        d = Rilld(RILLD, MODEL, os.path.join(tmp, "s3"), "--http", "0.0.0.0:1")
        d.start(expect_exit=True)
        assert d.proc.wait(30) != 0 and "without --http-tokens" in d.log(), d.log()


def metric(text, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    key = f"{name}{{{want}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{key} not in the metrics")


def t_metrics():
    """GET /metrics is Prometheus text (promtool checks it) that counts HTTP requests: asks by
    command, the door's own refusals as "invalid", completions, TTFT."""
    with tempfile.TemporaryDirectory() as tmp, daemon(tmp) as d:
        st, text, r = call(d, "GET", "/metrics")
        assert st == 200 and r.getheader("Content-Type").startswith("text/plain; version=0.0.4")
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and p.stdout.strip() == "", (p.stdout, p.stderr)
        ok(d, "POST", "/v1/sessions", {"session": "m"}, want=201)
        ok(d, "POST", "/v1/sessions/m/ingest", {"text": FACTS})
        for _ in range(3):
            ok(d, "POST", "/v1/sessions/m/ask", {"question": "How old is Bob?", "max_tokens": 4})
        error_of(d, "POST", "/v1/sessions/m/ask", raw=b"{not json")
        error_of(d, "GET", "/v1/nowhere")
        ok(d, "POST", "/v1/completions", {"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 2})
        after = call(d, "GET", "/metrics")[1]
        p = subprocess.run(["promtool", "check", "metrics"], input=after, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and p.stdout.strip() == "", (p.stdout, p.stderr)
        for cmd, n in [("ask", 3), ("complete", 1), ("invalid", 2), ("session.create", 1)]:
            got = metric(after, "rill_requests_total", command=cmd) - \
                metric(text, "rill_requests_total", command=cmd)
            assert got == n, (cmd, got)
        assert metric(after, "rill_request_errors_total", command="invalid") - \
            metric(text, "rill_request_errors_total", command="invalid") == 2
        assert metric(after, "rill_ttft_seconds_count") - metric(text, "rill_ttft_seconds_count") \
            == 3


def t_both_doors():
    """One owner on both doors: a CURVE client's owner is its key file's name, the name a bearer
    token carries; state written when owners were Z85 keys is mapped to names at restore."""
    with tempfile.TemporaryDirectory() as tmp:
        keys = os.path.join(tmp, "keys")
        os.makedirs(os.path.join(keys, "clients"))
        spub, _ = keygen(RILL, os.path.join(keys, "server"))
        apub, asec = keygen(RILL, os.path.join(keys, "clients", "alice"))
        keygen(RILL, os.path.join(keys, "clients", "bob"))
        tf = os.path.join(tmp, "tokens")
        with open(tf, "w") as f:
            f.write("alice-token-0123456789 alice\nbob-token-0123456789abc bob\n")
        A, B = "alice-token-0123456789", "bob-token-0123456789abc"
        state = os.path.join(tmp, "state")
        extra = ("--curve-keys", keys, "--http-tokens", tf)
        with Rilld(RILLD, MODEL, state, *extra, http=True) as d:
            ctx = zmq.Context.instance()
            z = ctx.socket(zmq.DEALER)
            z.setsockopt(zmq.LINGER, 0)
            z.curve_publickey, z.curve_secretkey = apub.encode(), asec.encode()
            z.curve_serverkey = spub.encode()
            z.connect(d.req_ep)
            z.send(msgpack.packb({"v": 1, "id": 1, "cmd": "session.create",
                                  "args": {"session": "s1"}}))
            assert z.poll(60000)
            rep = msgpack.unpackb(z.recv(), raw=False)
            z.close()
            assert rep["status"] == "OK", rep
            assert ok(d, "GET", "/v1/sessions", token=A) == {"sessions": ["s1"]}
            assert error_of(d, "GET", "/v1/sessions/s1", token=B)[0] == 403
            assert d.stop() == 0
        meta = os.path.join(state, "s1.meta")
        fields = open(meta).read().split()
        assert fields[0] == "alice", fields
        with open(meta, "w") as f:  # as rilld wrote it before owners were names
            f.write(" ".join([apub] + fields[1:]) + "\n")
        with Rilld(RILLD, MODEL, state, *extra, http=True) as d:
            assert ok(d, "GET", "/v1/sessions/s1", token=A)["version"] == 0
            assert error_of(d, "GET", "/v1/sessions/s1", token=B)[0] == 403
        assert open(meta).read().split()[0] == "alice"


def t_hostile():
    """Oversized headers and bodies, malformed JSON, invalid UTF-8, deep nesting, a thousand
    idle connections, a client that stops reading: each gets a clear 4xx or is cut off, nothing
    changes, and the daemon keeps serving."""
    with tempfile.TemporaryDirectory() as tmp, daemon(tmp, "--max-msg", "65536",
                                                      "--http-stream-buffer", "8192") as d:
        ok(d, "POST", "/v1/sessions", {"session": "h"}, want=201)
        ok(d, "POST", "/v1/sessions/h/ingest", {"text": FACTS, "flush": True})
        before = ok(d, "GET", "/v1/sessions/h")
        st, e = error_of(d, "POST", "/v1/sessions/h/ingest", raw=b'{"text": "' + b"x" * 70000 +
                         b'"}')
        assert st == 413, (st, e)
        for raw, code in [(b'{"text": ', "EFORMAT"), (b"[1, 2]", "EFORMAT"),
                          (b'{"text": "\xff\xfe"}', "EFORMAT"), (b"\x00\x01", "EFORMAT"),
                          (b'{"text": "a", "text": "b"}', "EFORMAT"),
                          (b'{"text": ' + b"[" * 50 + b"]" * 50 + b"}", "EFORMAT"),
                          (b'{"text": "x", "flush": "yes"}', "EFORMAT"),
                          (b'{"text": "x", "extra": {"deep": 1}}', "EINVAL")]:
            st, e = error_of(d, "POST", "/v1/sessions/h/ingest", raw=raw)
            assert st == 400 and e["code"] == code, (raw[:40], st, e)
        # 100 KB of headers: refused. libmicrohttpd answers and closes while the client may still
        # be sending, so the client sees the status or, on a loaded machine, a reset
        port = int(d.http.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            req = (b"POST /v1/sessions/h/ingest HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * 100000 +
                   b"\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n"
                   b'{"text": "ok"}')
            got = b""
            try:
                s.sendall(req)
                while b"\r\n" not in got:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
            except (BrokenPipeError, ConnectionResetError):
                pass
            status = got.split(b"\r\n", 1)[0]
            print("  big headers ->", status or "reset")
            assert status == b"" or status.split()[1] in (b"413", b"431"), status
        assert ok(d, "GET", "/v1/sessions/h") == before
        # a thousand idle connections, then a request still works
        idle = []
        try:
            for _ in range(1000):
                s = socket.create_connection(("127.0.0.1", int(d.http.rsplit(":", 1)[1])))
                idle.append(s)
            for s in idle[:100]:
                s.sendall(b"GET /v1/sessions HTTP/1.1\r\nHost: x\r\n")  # and never finish
            assert ok(d, "GET", "/v1/sessions/h") == before
        finally:
            for s in idle:
                s.close()
        # a client that follows events and stops reading: its stream is cut (event_drops),
        # nothing else is
        host, port = d.http[len("http://"):].split(":")
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect((host, int(port)))
        slow.sendall(b"GET /v1/sessions/h/events HTTP/1.1\r\nHost: x\r\n\r\n")
        drops = 0
        for i in range(200):
            ok(d, "POST", "/v1/sessions/h/ask", {"question": f"Say {i} words?", "max_tokens": 32})
            drops = zmq_stats(d)["event_drops"]
            if drops > 0:
                break
        assert drops > 0, "the stream of a client that stopped reading was never cut"
        a = ok(d, "POST", "/v1/sessions/h/ask", {"question": "How old is Bob?", "max_tokens": 4})
        assert a["answer"], a
        slow.settimeout(10)
        got = b""
        while True:  # the stream ends: what was queued, then the close
            chunk = slow.recv(65536)
            if not chunk:
                break
            got += chunk
        assert b"event: token" in got, got[:200]
        slow.close()
        assert d.alive()


def t_stop():
    """SIGTERM while HTTP connections are suspended - an events stream still followed, one its
    client closed (rilld notices that only when it next writes to it), an ask waiting for its
    answer: rilld closes them, exits 0, and its sessions come back at the next start."""
    with tempfile.TemporaryDirectory() as tmp, daemon(tmp) as d:
        ok(d, "POST", "/v1/sessions", {"session": "s"}, want=201)
        ok(d, "POST", "/v1/sessions/s/ingest", {"text": FACTS, "flush": True})
        followed = Sse(d, "GET", "/v1/sessions/s/events")
        Sse(d, "GET", "/v1/sessions/s/events").close()
        host, port = d.http[len("http://"):].split(":")
        asker = socket.create_connection((host, int(port)))
        body = json.dumps({"question": "Tell a long story.", "max_tokens": 1024}).encode()
        asker.sendall(b"POST /v1/sessions/s/ask HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\n\r\n" + body)
        time.sleep(0.3)  # the ask is taken and its connection suspended
        assert d.stop() == 0, d.log()
        while followed.next() is not None:  # the ask's tokens, then the stream's end
            pass
        followed.close()
        asker.close()
        d.start()
        assert ok(d, "GET", "/v1/sessions/s")["version"] == 1


# ---- driver ------------------------------------------------------------------------------------

def main():
    if openai is None or zmq is None:
        print("SKIP: openai, pyzmq and msgpack are needed (scripts/setup.sh installs them)")
        return 77
    if not os.path.exists(MODEL):
        print(f"SKIP: {MODEL} is missing (scripts/setup.sh downloads it)")
        return 77
    tests = {n[2:]: fn for n, fn in globals().items() if n.startswith("t_") and callable(fn)}
    return run_tests(tests, ONLY)


if __name__ == "__main__":
    sys.exit(main())
