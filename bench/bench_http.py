#!/usr/bin/env python3
"""rilld's two front doors side by side: what HTTP costs against ZeroMQ, on one daemon.

Starts one rilld (ZeroMQ and --http on free loopback ports, a temporary --state) and measures,
interleaving the doors so that whatever else the machine does hits both alike:

1. ask: the same question on the same session (max_tokens 1 and 16), round after round over
   ZeroMQ (DEALER, msgpack), HTTP JSON (POST .../ask, one keep-alive connection) and HTTP SSE
   ("stream": true, to the answer event; a new connection each), the order rotating each
   round. Per door: p50/p99 of the client's wall time, of the reply's total_ms (the engine's
   time for the ask), and of the overhead = wall time - total_ms: the client library,
   loopback, the socket thread, the door's decoding and encoding, the hand-over to the engine
   thread and back. Ratios HTTP/ZeroMQ of the p50s and p99s, the median of the per-round
   ratios, and HTTP's overhead minus ZeroMQ's.
2. events: one HTTP events stream (GET .../events) and one SUB socket follow the same session;
   a standing query is registered, then each round ingests a line (the standing answer is
   refreshed and pushed) and asks a question (its tokens are pushed). Each subscriber is a
   process of its own that only waits on its socket and stamps each event as it reads it (one
   clock for all: CLOCK_MONOTONIC); per event (matched by topic and seq): the HTTP arrival minus
   the ZeroMQ arrival, and for standing events the time from the ingest's reply to each.
3. load: K client threads, each with its own keep-alive connection (HTTP: GET
   /v1/sessions/NAME; ZeroMQ: its own DEALER, session.stats), as fast as they can for a fixed
   time, in slices H Z Z H; per door: requests/s, p50/p99 latency, errors, and rilld's CPU time
   per request (its /proc utime+stime over the slice, less its idle rate). The clients are
   Python threads sharing the daemon's cores, so requests/s is of client and daemon together;
   CPU per request is the daemon's own cost.

Usage: bench/bench_http.py [--rilld PATH] [--model FILE] [--threads N] [--rounds N]
           [--seconds S] [--clients K] [--quick] [--check] [--json]
Human text goes to stdout, or to stderr with --json, which prints one JSON line per figure
group (part "ask", "events", "load") and a summary line. --quick is the CI size (a few
seconds of measuring); --check exits 1 unless every figure is finite and > 0 (differences
aside: those only finite), no request failed, every event reached both subscribers and rilld
exited 0 on SIGTERM. Exits 77 (skip) without pyzmq/msgpack or the
model. Needs the project's .venv (scripts/setup.sh).
"""
import argparse
import http.client
import json
import math
import multiprocessing
import os
import queue
import select
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time

try:
    import msgpack
    import zmq
except ImportError:  # pragma: no cover - reported as a skip
    zmq = msgpack = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from rilld_harness import Rilld  # noqa: E402
FACTS = ("The capital of France is Paris. The sky is blue. Bob is 42 years old. "
         "The train leaves at nine.\n")
QUESTION = "How old is Bob?"
STANDING = "Where does the train leave?"
SESSION = "bench"
OUT = sys.stdout


def say(*a):
    print(*a, file=OUT, flush=True)


def pct(xs, p):
    """The p-th percentile (0..100) of xs, linear between closest ranks."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(xs):
    return {"n": len(xs), "p50": pct(xs, 50), "p99": pct(xs, 99)}


# ---- the daemon ------------------------------------------------------------------------------

class Daemon(Rilld):
    """The tests' rilld (tests/rilld_harness.py) with HTTP, and its CPU time."""

    def __init__(self, rilld, model, threads, tmp):
        super().__init__(rilld, model, os.path.join(tmp, "state"), http=True, threads=threads)
        self.http_port = None

    def start(self, expect_exit=False):
        super().start(expect_exit)
        self.http_port = int(self.http.rsplit(":", 1)[1])
        return self

    def cpu_s(self):
        """rilld's user + system CPU time so far, in seconds."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---- clients ---------------------------------------------------------------------------------

class ZClient:
    """A DEALER speaking docs/protocol.md."""

    def __init__(self, ctx, d):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(d.req_ep)
        self.next_id = 1

    def send(self, cmd, args):
        rid = self.next_id
        self.next_id += 1
        self.sock.send(msgpack.packb({"v": 1, "id": rid, "cmd": cmd, "args": args}))
        return rid

    def recv(self, rid, timeout=120):
        if not self.sock.poll(int(timeout * 1000)):
            raise TimeoutError("no reply from rilld")
        r = msgpack.unpackb(self.sock.recv(), raw=False)
        if r.get("id") != rid:
            raise RuntimeError(f"reply {r.get('id')} to request {rid}")
        return r

    def call(self, cmd, **args):
        """(result, wall seconds); raises on an error reply."""
        t0 = time.perf_counter()
        r = self.recv(self.send(cmd, args))
        wall = time.perf_counter() - t0
        if r["status"] != "OK":
            raise RuntimeError(f"{cmd}: {r['status']}: {r['message']}")
        return r["result"], wall

    def close(self):
        self.sock.close(0)


class HClient:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, d):
        self.conn = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=120)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def request(self, method, path, body=None):
        """(status, decoded JSON or text, wall seconds)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        t0 = time.perf_counter()
        self.conn.request(method, path, body=data, headers=headers)
        resp = self.conn.getresponse()
        raw = resp.read()
        wall = time.perf_counter() - t0
        ctype = resp.getheader("Content-Type", "")
        return resp.status, (json.loads(raw) if "json" in ctype else raw.decode()), wall

    def call(self, method, path, body=None):
        st, j, wall = self.request(method, path, body)
        if st // 100 != 2:
            raise RuntimeError(f"{method} {path}: {st} {j}")
        return j, wall

    def close(self):
        self.conn.close()


class SSE:
    """A server-sent events stream read off a raw socket (HTTP/1.1, chunked), so that it can be
    polled beside ZeroMQ sockets: feed() takes what the socket holds and returns the events it
    completed, as (event, id, data) with data decoded from JSON."""

    def __init__(self, port, method, path, body=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = json.dumps(body).encode() if body is not None else b""
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
        self.sock.sendall(head.encode() + data)
        self.raw = b""       # bytes not yet de-chunked
        self.text = b""      # de-chunked bytes not yet parsed into events
        self.headers = None
        self.chunked = False
        self.done = False

    def fileno(self):
        return self.sock.fileno()

    def feed(self):
        b = self.sock.recv(1 << 16)
        if not b:
            self.done = True
        self.raw += b
        if self.headers is None:
            end = self.raw.find(b"\r\n\r\n")
            if end < 0:
                return []
            self.headers = self.raw[:end].decode("latin-1")
            status = self.headers.split("\r\n", 1)[0]
            if " 200 " not in status + " ":
                raise RuntimeError(f"SSE: {status}")
            self.chunked = "transfer-encoding: chunked" in self.headers.lower()
            self.raw = self.raw[end + 4:]
        if self.chunked:
            while True:
                nl = self.raw.find(b"\r\n")
                if nl < 0:
                    break
                size = int(self.raw[:nl].split(b";")[0], 16)
                if len(self.raw) < nl + 2 + size + 2:
                    break
                if size == 0:
                    self.done = True
                self.text += self.raw[nl + 2:nl + 2 + size]
                self.raw = self.raw[nl + 2 + size + 2:]
        else:
            self.text, self.raw = self.text + self.raw, b""
        events = []
        while True:
            end = self.text.find(b"\n\n")
            if end < 0:
                return events
            block, self.text = self.text[:end].decode(), self.text[end + 2:]
            ev = {"event": "message", "id": None, "data": []}
            for line in block.split("\n"):
                if line.startswith(":"):
                    continue
                k, _, v = line.partition(":")
                v = v[1:] if v.startswith(" ") else v
                if k == "data":
                    ev["data"].append(v)
                elif k in ("event", "id"):
                    ev[k] = v
            if ev["data"]:
                events.append((ev["event"], ev["id"], json.loads("\n".join(ev["data"]))))

    def close(self):
        self.sock.close()


# ---- 1. the same ask through each door --------------------------------------------------------

def ask_zmq(z, mt):
    r, wall = z.call("ask", session=SESSION, question=QUESTION, max_tokens=mt)
    return wall, r["total_ms"], r["answer"]


def ask_http(h, mt):
    r, wall = h.call("POST", f"/v1/sessions/{SESSION}/ask",
                     {"question": QUESTION, "max_tokens": mt})
    return wall, r["total_ms"], r["answer"]


def ask_sse(d, mt):
    t0 = time.perf_counter()
    s = SSE(d.http_port, "POST", f"/v1/sessions/{SESSION}/ask",
            {"question": QUESTION, "max_tokens": mt, "stream": True})
    try:
        while not s.done:
            for kind, _, data in s.feed():
                if kind == "answer":
                    return time.perf_counter() - t0, data["total_ms"], data["answer"]
        raise RuntimeError("SSE ask: the stream ended without an answer event")
    finally:
        s.close()


def part_ask(d, z, h, rounds, max_tokens, emit):
    doors = {"zmq": lambda mt: ask_zmq(z, mt), "http": lambda mt: ask_http(h, mt),
             "http_sse": lambda mt: ask_sse(d, mt)}
    names = list(doors)
    figures = []
    for mt in max_tokens:
        for name in names:  # warm-up, not counted
            doors[name](mt)
        wall = {n: [] for n in names}
        over = {n: [] for n in names}
        engine = {n: [] for n in names}
        answers = set()
        for i in range(rounds):
            for name in names[i % 3:] + names[:i % 3]:
                w, total_ms, answer = doors[name](mt)
                wall[name].append(w * 1e3)
                over[name].append(w * 1e3 - total_ms)
                engine[name].append(total_ms)
                answers.add(answer)
        per_round = [hh / zz for hh, zz in zip(wall["http"], wall["zmq"])]
        g = {"part": "ask", "max_tokens": mt, "rounds": rounds, "answers": len(answers)}
        for n in names:
            g[n] = {"wall_p50_ms": pct(wall[n], 50), "wall_p99_ms": pct(wall[n], 99),
                    "total_p50_ms": pct(engine[n], 50), "total_p99_ms": pct(engine[n], 99),
                    "overhead_p50_ms": pct(over[n], 50), "overhead_p99_ms": pct(over[n], 99)}
        g["http_over_zmq_p50"] = g["http"]["wall_p50_ms"] / g["zmq"]["wall_p50_ms"]
        g["http_over_zmq_p99"] = g["http"]["wall_p99_ms"] / g["zmq"]["wall_p99_ms"]
        g["http_over_zmq_paired"] = statistics.median(per_round)
        g["sse_over_zmq_p50"] = g["http_sse"]["wall_p50_ms"] / g["zmq"]["wall_p50_ms"]
        g["http_minus_zmq_overhead_p50_ms"] = (g["http"]["overhead_p50_ms"] -
                                               g["zmq"]["overhead_p50_ms"])
        emit(g)
        say(f"ask, max_tokens {mt}, {rounds} rounds (ms; overhead = wall - total_ms):")
        say(f"  {'door':<9} {'wall p50':>9} {'wall p99':>9} {'total p50':>9} {'total p99':>9} "
            f"{'over p50':>9} {'over p99':>9}")
        for n in names:
            f = g[n]
            say(f"  {n:<9} {f['wall_p50_ms']:9.2f} {f['wall_p99_ms']:9.2f} "
                f"{f['total_p50_ms']:9.2f} {f['total_p99_ms']:9.2f} "
                f"{f['overhead_p50_ms']:9.3f} {f['overhead_p99_ms']:9.3f}")
        say(f"  HTTP/ZeroMQ wall: p50 {g['http_over_zmq_p50']:.3f}, p99 "
            f"{g['http_over_zmq_p99']:.3f}, paired median {g['http_over_zmq_paired']:.3f}; "
            f"SSE/ZeroMQ p50 {g['sse_over_zmq_p50']:.3f}; HTTP's overhead - ZeroMQ's (p50) "
            f"{g['http_minus_zmq_overhead_p50_ms']:.3f} ms")
        figures.append(g)
    return figures


# ---- 2. events on both subscribers ----------------------------------------------------------

def follower(door, ev_ep, http_port, q, stop):
    """A subscriber in a process of its own, doing nothing but wait on its socket: each event,
    stamped (time.monotonic, one clock for every process) as soon as its bytes are read, goes
    to q as (door, topic, seq, kind, data_version, t). ("ready", door) first, once it follows."""
    if door == "zmq":
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.connect(ev_ep)
        sub.setsockopt(zmq.SUBSCRIBE, f"{SESSION}/".encode())
        time.sleep(0.3)  # the subscription reaches rilld on its own (ZeroMQ's slow joiner)
        q.put(("ready", door))
        while not stop.is_set():
            if not sub.poll(100):
                continue
            t = time.monotonic()
            topic, payload = sub.recv_multipart()
            e = msgpack.unpackb(payload, raw=False)
            q.put((door, topic.decode(), e["seq"], e["kind"], e.get("data_version"), t))
        sub.close(0)
        ctx.term()
        return
    sse = SSE(http_port, "GET", f"/v1/sessions/{SESSION}/events")
    ready = False
    while not stop.is_set() and not sse.done:
        if not select.select([sse.sock], [], [], 0.1)[0]:
            continue
        t = time.monotonic()
        for kind, eid, data in sse.feed():
            topic, _, seq = eid.rpartition(":")
            q.put((door, topic, int(seq), kind, data.get("data_version"), t))
        if not ready and sse.headers is not None:
            ready = True
            q.put(("ready", door))
    sse.close()


def part_events(d, z, rounds, emit):
    mp = multiprocessing.get_context("spawn")
    q, stop = mp.Queue(), mp.Event()
    procs = [mp.Process(target=follower, args=(door, d.ev_ep, d.http_port, q, stop), daemon=True)
             for door in ("zmq", "http")]
    for p in procs:
        p.start()
    seen = {}  # (topic, seq) -> {"zmq": t, "http": t, "kind": k, "data_version": v}
    ready = set()

    def take(timeout_s):
        try:
            m = q.get(timeout=timeout_s)
        except queue.Empty:
            return
        if m[0] == "ready":
            ready.add(m[1])
            return
        door, topic, seq, kind, dv, t = m
        rec = seen.setdefault((topic, seq), {"kind": kind, "data_version": dv})
        rec.setdefault(door, t)

    def wait(pred, what, timeout_s=120):
        deadline = time.monotonic() + timeout_s
        while not pred():
            left = deadline - time.monotonic()
            if left <= 0 or not all(p.is_alive() for p in procs):
                raise TimeoutError(f"events: waited for {what}")
            take(min(1.0, left))

    def call(cmd, **args):
        r = z.recv(z.send(cmd, args))
        t = time.monotonic()
        if r["status"] != "OK":
            raise RuntimeError(f"events: {cmd}: {r['status']}: {r['message']}")
        return t, r["result"]

    def both(k):
        return "zmq" in seen[k] and "http" in seen[k]

    def on_both(kind, dv=None):
        return next((k for k, v in seen.items() if v["kind"] == kind and both(k)
                     and (dv is None or v["data_version"] == dv)), None)

    try:
        wait(lambda: len(ready) == 2, "both subscribers", timeout_s=60)
        _, std = call("standing.register", session=SESSION, question=STANDING, max_tokens=8)
        wait(lambda: on_both("standing") is not None, "the first standing answer on both")
        seen.clear()
        from_reply = {"zmq": [], "http": []}
        for i in range(rounds):
            t0, res = call("ingest.text", session=SESSION, text=f"Round {i} is done.\n",
                           flush=True)
            wait(lambda: on_both("standing", res["version"]) is not None,
                 f"the standing answer of version {res['version']}")
            rec = seen[on_both("standing", res["version"])]
            for door in from_reply:
                from_reply[door].append((rec[door] - t0) * 1e3)
            n_answers = sum(1 for v in seen.values() if v["kind"] == "answer")
            call("ask", session=SESSION, question=QUESTION, max_tokens=16)
            wait(lambda: sum(1 for k, v in seen.items() if v["kind"] == "answer" and both(k))
                 > n_answers, "the ask's answer event on both subscribers", timeout_s=10)
        deadline = time.monotonic() + 1.0  # stragglers
        while not all(both(k) for k in seen) and time.monotonic() < deadline:
            take(0.1)
        call("standing.unregister", session=SESSION, qid=std["qid"])
    finally:
        stop.set()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
    missing = [k for k in seen if not both(k)]
    deltas = {}
    for k, v in seen.items():
        if both(k):
            deltas.setdefault(v["kind"], []).append((v["http"] - v["zmq"]) * 1e3)
    alld = [x for xs in deltas.values() for x in xs]
    g = {"part": "events", "rounds": rounds, "events": len(seen), "missing": len(missing),
         "http_minus_zmq_ms": {"all": summary(alld),
                               **{k: summary(xs) for k, xs in sorted(deltas.items())}},
         "standing_from_ingest_reply_ms": {door: summary(xs) for door, xs in from_reply.items()}}
    emit(g)
    say(f"events, {rounds} rounds: {len(seen)} events, {len(missing)} not on both subscribers")
    say("  arrival on the HTTP stream minus arrival on the SUB socket (ms):")
    for k, s in g["http_minus_zmq_ms"].items():
        say(f"    {k:<9} n {s['n']:4d}  p50 {s['p50']:8.3f}  p99 {s['p99']:8.3f}")
    say("  standing event after the ingest's reply (ms; the refresh's compute included):")
    for door, s in g["standing_from_ingest_reply_ms"].items():
        say(f"    {door:<9} p50 {s['p50']:8.2f}  p99 {s['p99']:8.2f}")
    return g


# ---- 3. load: many cheap requests ------------------------------------------------------------

def load_slice(d, ctx, door, clients, seconds):
    """K threads, each with its own connection, doing session.stats for `seconds`."""
    lat = [[] for _ in range(clients)]
    errors = [0] * clients
    conns = []
    for _ in range(clients):
        conns.append(HClient(d) if door == "http" else ZClient(ctx, d))
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def worker(i):
        c, mine = conns[i], lat[i]
        start.wait()
        end = deadline[0]
        while True:
            t0 = time.perf_counter()
            if t0 >= end:
                return
            try:
                if door == "http":
                    st, j, _ = c.request("GET", f"/v1/sessions/{SESSION}")
                    ok = st == 200 and "version" in j
                else:
                    r = c.recv(c.send("session.stats", {"session": SESSION}), timeout=10)
                    ok = r["status"] == "OK"
            except Exception:  # noqa: BLE001 - counted, and the connection made anew
                ok = False
                c.close()
                conns[i] = c = HClient(d) if door == "http" else ZClient(ctx, d)
            if ok:
                mine.append((time.perf_counter() - t0) * 1e3)
            else:
                errors[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    cpu0 = d.cpu_s()
    t0 = time.perf_counter()
    deadline[0] = t0 + seconds
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    cpu = d.cpu_s() - cpu0
    for c in conns:
        c.close()
    return [x for xs in lat for x in xs], sum(errors), elapsed, cpu


def part_load(d, ctx, clients, seconds, emit):
    idle0, t0 = d.cpu_s(), time.perf_counter()
    time.sleep(min(1.0, seconds / 2))
    idle_rate = (d.cpu_s() - idle0) / (time.perf_counter() - t0)  # rilld's CPU s/s doing nothing
    acc = {door: {"lat": [], "errors": 0, "elapsed": 0.0, "cpu": 0.0} for door in ("http", "zmq")}
    for door in ("http", "zmq", "zmq", "http"):
        lat, errors, elapsed, cpu = load_slice(d, ctx, door, clients, seconds / 2)
        a = acc[door]
        a["lat"] += lat
        a["errors"] += errors
        a["elapsed"] += elapsed
        a["cpu"] += cpu
    g = {"part": "load", "clients": clients, "seconds_per_door": seconds,
         "idle_cpu_s_per_s": idle_rate}
    for door, a in acc.items():
        n = len(a["lat"])
        busy = max(0.0, a["cpu"] - idle_rate * a["elapsed"])
        g[door] = {"requests": n, "errors": a["errors"], "req_s": n / a["elapsed"],
                   "p50_ms": pct(a["lat"], 50), "p99_ms": pct(a["lat"], 99),
                   "rilld_cpu_us_per_req": busy / n * 1e6 if n else float("nan")}
    g["http_over_zmq_req_s"] = g["http"]["req_s"] / g["zmq"]["req_s"]
    g["http_over_zmq_cpu"] = (g["http"]["rilld_cpu_us_per_req"] /
                              g["zmq"]["rilld_cpu_us_per_req"])
    emit(g)
    say(f"load: {clients} clients, {seconds:g} s per door (slices H Z Z H), session.stats:")
    say(f"  {'door':<5} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6} "
        f"{'rilld CPU us/req':>16}")
    for door in ("zmq", "http"):
        f = g[door]
        say(f"  {door:<5} {f['req_s']:8.0f} {f['p50_ms']:8.3f} {f['p99_ms']:8.3f} "
            f"{f['errors']:6d} {f['rilld_cpu_us_per_req']:16.1f}")
    say(f"  HTTP/ZeroMQ: req/s {g['http_over_zmq_req_s']:.3f}, rilld CPU per request "
        f"{g['http_over_zmq_cpu']:.3f}")
    return g


# ---- main ------------------------------------------------------------------------------------

def numbers(x):
    """Every number in a figure group (bools and counts of failures aside)."""
    if isinstance(x, dict):
        for k, v in x.items():
            if k not in ("errors", "missing", "part"):
                yield from ((f"{k}.{p}" if p else k, n) for p, n in numbers(v))
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield "", x


def main():
    global OUT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rilld", default=os.path.join(ROOT, "build", "cli", "rilld"))
    ap.add_argument("--model", default=os.environ.get("RILL_MODEL") or os.path.join(
        ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=1, help="rilld's engine threads (default 1)")
    ap.add_argument("--rounds", type=int, default=None, help="asks per door and max_tokens "
                    "(default 60; --quick 4); event rounds are a third of it")
    ap.add_argument("--seconds", type=float, default=None,
                    help="load test seconds per door (default 6; --quick 1)")
    ap.add_argument("--clients", type=int, default=None,
                    help="load test client threads (default 4; --quick 2)")
    ap.add_argument("--quick", action="store_true", help="the CI size")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every figure is finite and > 0 and nothing failed")
    ap.add_argument("--json", action="store_true", help="JSON lines on stdout, text on stderr")
    o = ap.parse_args()
    rounds = o.rounds if o.rounds is not None else (4 if o.quick else 60)
    seconds = o.seconds if o.seconds is not None else (1.0 if o.quick else 6.0)
    clients = o.clients if o.clients is not None else (2 if o.quick else 4)
    if rounds < 1 or seconds <= 0 or clients < 1 or o.threads < 1:
        sys.exit("bench_http: --rounds, --clients and --threads must be >= 1, --seconds > 0")
    if zmq is None:
        print("bench_http: skipped: pyzmq and msgpack are needed (scripts/setup.sh)")
        sys.exit(77)
    if not os.path.exists(o.model):
        print(f"bench_http: skipped: no model {o.model}")
        sys.exit(77)
    if not os.access(o.rilld, os.X_OK):
        sys.exit(f"bench_http: no rilld at {o.rilld} (build it, or give --rilld)")
    OUT = sys.stderr if o.json else sys.stdout
    groups = []

    def emit(g):
        groups.append(g)
        if o.json:
            print(json.dumps(g), flush=True)

    tmp = tempfile.mkdtemp(prefix="bench_http-")
    d = Daemon(o.rilld, o.model, o.threads, tmp)
    ctx = zmq.Context()
    ok = True
    try:
        d.start()
        say(f"rilld {o.rilld}, model {os.path.basename(o.model)}, {o.threads} engine thread(s), "
            f"{os.cpu_count()} cores")
        z, h = ZClient(ctx, d), HClient(d)
        z.call("session.create", session=SESSION)
        z.call("ingest.text", session=SESSION, text=FACTS, flush=True)
        part_ask(d, z, h, rounds, (1, 16), emit)
        ev = part_events(d, z, max(2, rounds // 3), emit)
        ld = part_load(d, ctx, clients, seconds, emit)
        h.close()
        z.close()
        rc = d.stop()
        if rc != 0:
            say(f"bench_http: rilld exited with {rc} on SIGTERM:\n{d.log()}")
            ok = False
        bad = [f"{g['part']}.{k}={v}" for g in groups for k, v in numbers(g)
               if not (math.isfinite(v) and v > 0)
               and not k.startswith("http_minus_zmq")  # a difference: may be <= 0
               and k != "idle_cpu_s_per_s"]
        if ev["missing"] or ld["http"]["errors"] or ld["zmq"]["errors"]:
            bad.append(f"missing events {ev['missing']}, load errors http "
                       f"{ld['http']['errors']} zmq {ld['zmq']['errors']}")
        for k, v in numbers(ev["http_minus_zmq_ms"]):
            if not math.isfinite(v):
                bad.append(f"events.http_minus_zmq_ms.{k}={v}")
        summ = {"part": "summary", "rounds": rounds, "seconds": seconds, "clients": clients,
                "threads": o.threads, "model": os.path.basename(o.model), "bad": bad}
        if o.json:
            print(json.dumps(summ), flush=True)
        if bad:
            say("bench_http: figures that are not sane: " + "; ".join(bad))
            ok = False
    finally:
        d.kill()
        ctx.destroy(linger=0)
        shutil.rmtree(tmp, ignore_errors=True)
    if o.check and not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
