#!/usr/bin/env python3
"""The rill command's client sub-commands against a real rilld, end to end: session new / list /
stats / close, ingest from stdin, ask with the streamed answer, standing add / ls / rm, watch
--count 1, ticks from a CSV and a .msgpack file (bad ticks counted as rejected), the server's
errors as exit code 1 with the status name and message, usage errors as exit code 2; and CURVE:
keys from `rill keygen`, a listed key works, an unlisted key fails cleanly, another key's session
is EPERM.

Usage: test_client_cli.py RILL_BINARY SOURCE_DIR. Exits 77 (skip) when the default model is
absent. Prints 'N passed, N failed' last. The daemon runs with --question-format "%s" (a
continuation prompt): the small default model answers a "Question:/Answer:" prompt with an
end-of-text at once.
"""
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback

RILL, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
results = []


def free_ports(n):
    """n distinct free loopback ports (the sockets are held open together, so they differ)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Daemon:
    def __init__(self, tmp, name, *extra):
        req, ev = free_ports(2)
        self.req = f"tcp://127.0.0.1:{req}"
        self.ev = f"tcp://127.0.0.1:{ev}"
        ready = os.path.join(tmp, name + ".ready")
        self.log = open(os.path.join(tmp, name + ".log"), "w")
        self.p = subprocess.Popen(
            [RILL, "serve", "--model", MODEL, "--state", os.path.join(tmp, name + ".state"),
             "--listen", self.req, "--events", self.ev, "--ready-file", ready, "--threads", "1",
             "--kv-cells", "16384", "--question-format", "%s", *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            if os.path.exists(ready):
                return
            if self.p.poll() is not None:
                raise RuntimeError(f"rilld exited at start: {self.log.name}")
            time.sleep(0.05)
        raise RuntimeError("rilld did not get ready in 30 s")

    def opts(self):
        return ["--connect", self.req, "--events", self.ev]

    def stop(self):
        # SIGTERM snapshots every session, evaluating its queued input first: t_ticks leaves
        # ~800 tokens queued, ~25 s of work in the sanitizer builds at one thread
        self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        self.log.close()
        return rc


def run(*args, ok=(0,), stdin=None, timeout=60):
    p = subprocess.run([RILL, *args], capture_output=True, text=True, input=stdin,
                       timeout=timeout)
    if p.returncode not in ok:
        raise AssertionError(f"rill {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def check(name, fn):
    t0 = time.time()
    try:
        fn()
        results.append((name, None))
    except Exception as e:  # noqa: BLE001 - report every failure, keep going
        results.append((name, repr(e) + "\n" + traceback.format_exc()))
    print(f"  {name}: {time.time() - t0:.1f} s", flush=True)


def pack_str(s):
    b = s.encode()
    assert len(b) < 32
    return bytes([0xa0 | len(b)]) + b


def pack_tick(symbol, ts, price, size):
    """A msgpack tick map, by hand (no msgpack module needed)."""
    return (bytes([0x84]) + pack_str("symbol") + pack_str(symbol) + pack_str("ts") + b"\xd3" +
            struct.pack(">q", ts) + pack_str("price") + b"\xcb" + struct.pack(">d", price) +
            pack_str("size") + b"\xd3" + struct.pack(">q", size))


def main():
    if not os.path.exists(MODEL):
        print(f"SKIP: {MODEL} is absent (scripts/setup.sh)")
        return 77
    tmp = tempfile.mkdtemp(prefix="rill-test-client-cli-")
    d = Daemon(tmp, "plain")
    o = d.opts()

    def t_help_and_usage():
        for sub in (["session", "new"], ["session", "close"], ["session", "list"],
                    ["session", "stats"], ["ingest"], ["ask"], ["standing", "add"],
                    ["standing", "rm"], ["standing", "ls"], ["watch"], ["server-stats"]):
            out = run(*sub, "--help").stdout
            assert out.startswith("usage: rill " + " ".join(sub)), out
            assert "--connect" in out and "--curve-key" in out and "--timeout-ms" in out, out
        assert "rill session new" in run("session", "--help").stdout
        assert "rill standing add" in run("standing", "--help").stdout
        assert run("session", ok=(2,)).returncode == 2
        assert run("session", "frob", ok=(2,)).returncode == 2
        e = run("ask", "x", ok=(2,)).stderr
        assert "missing arguments" in e, e
        e = run("session", "new", "--bogus", ok=(2,)).stderr
        assert "unknown option" in e, e
        e = run("session", "list", "--timeout-ms", "0", ok=(2,)).stderr
        assert "--timeout-ms" in e, e
        e = run("session", "list", "--curve-key", "k", ok=(2,)).stderr
        assert "--curve-server-key" in e, e
        e = run("standing", "rm", "x", "notanumber", *o, ok=(2,)).stderr
        assert "QID" in e, e
        for cmd in ("session", "ingest", "ask", "standing", "watch", "server-stats"):
            assert cmd in run("--help").stdout

    def t_sessions():
        assert run("session", "new", "t1", "--window", "0", *o).stdout == "t1\n"
        auto = run("session", "new", "--system", "Be brief.", *o).stdout.strip()
        assert auto.startswith("s"), auto
        names = run("session", "list", *o).stdout.split()
        assert "t1" in names and auto in names, names
        st = dict(line.split() for line in run("session", "stats", "t1", *o).stdout.splitlines())
        assert st["window"] == "0" and st["sinks"] == "0" and st["version"] == "0", st
        path = run("session", "snapshot", "t1", *o).stdout.strip()
        assert path.endswith("t1.snap") and os.path.exists(path), path
        run("session", "close", auto, *o)
        assert auto not in run("session", "list", *o).stdout.split()
        e = run("session", "new", "t1", *o, ok=(1,)).stderr
        assert "EEXIST" in e, e

    def t_errors():
        e = run("session", "stats", "nope", *o, ok=(1,)).stderr
        assert e.startswith("rill session stats: ENOTFOUND: no such session"), e
        e = run("ask", "nope", "hello", *o, ok=(1,)).stderr
        assert "ENOTFOUND" in e, e
        e = run("session", "close", "nope", *o, ok=(1,)).stderr
        assert "ENOTFOUND" in e, e
        e = run("standing", "ls", "nope", *o, ok=(1,)).stderr
        assert "ENOTFOUND" in e, e
        e = run("watch", "nope", *o, ok=(1,)).stderr
        assert "ENOTFOUND" in e, e
        e = run("ingest", "nope", *o, stdin="text", ok=(1,)).stderr
        assert "ENOTFOUND" in e, e
        e = run("session", "stats", "bad name!", *o, ok=(1,)).stderr
        assert "EINVAL" in e and "session name" in e, e
        e = run("session", "list", "--connect", f"tcp://127.0.0.1:{free_ports(1)[0]}",
                "--timeout-ms", "300", ok=(1,)).stderr
        assert "ETIMEDOUT" in e and "no connection" in e, e
        st = dict(line.split() for line in run("server-stats", *o).stdout.splitlines())
        assert int(st["requests"]) > 0 and int(st["total_pages"]) > 0, st
        (model,) = st["models"].split(",")  # one model: the daemon's default
        assert int(st[f"model.{model}.sessions"]) == int(st["sessions"]), st
        assert int(st["engine_drops"]) == 0, st

    def t_ingest_and_ask():
        text = "Alice lives in Paris. Bob lives in Rome. Alice likes to swim."
        out = run("ingest", "t1", "--chunk", "7", *o, stdin=text).stdout
        assert out.startswith(f"ingested {len(text)} bytes in "), out
        assert int(out.split()[4]) >= 10, out  # at least 9 chunks and the flush
        st = dict(line.split() for line in run("session", "stats", "t1", *o).stdout.splitlines())
        assert int(st["n_seen"]) > 10 and st["held_text"] == "0", st
        p = run("ask", "t1", " Bob lives in", "--max-tokens", "8", *o)
        assert "Rome" in p.stdout and p.stdout.endswith("\n"), p.stdout
        assert not p.stdout.startswith(" "), p.stdout
        assert "ttft" in p.stderr and "version" in p.stderr and "context" in p.stderr, p.stderr
        q = run("ask", "t1", " Bob lives in", "-n", "8", "--no-stream", *o)
        assert q.stdout == p.stdout, (p.stdout, q.stdout)
        v = run("ask", "t1", " Bob lives in", "-n", "8", "--consistency", "evaluated", *o)
        assert v.stdout == p.stdout and "on evaluated data" in v.stderr, (v.stdout, v.stderr)
        assert "on evaluated data" not in p.stderr, p.stderr
        e = run("ask", "t1", "q", "--consistency", "eventual", *o, ok=(2,)).stderr
        assert "neither 'acknowledged' nor 'evaluated'" in e, e
        # the streamed text is what was printed as it came: watch the token events too
        w = subprocess.Popen([RILL, "watch", "t1", "--all", "--count", "3", *o],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        run("ask", "t1", " Bob lives in", "-n", "2", *o)
        out, err = w.communicate(timeout=20)
        assert w.returncode == 0, err
        assert out.startswith("token rid "), out

    def t_standing_and_watch():
        qid = run("standing", "add", "t1", " Alice lives in", "-n", "4", *o).stdout.strip()
        assert qid.isdigit(), qid
        ls = run("standing", "ls", "t1", *o).stdout
        assert "Alice lives in" in ls and ls.splitlines()[1].split()[0] == qid, ls
        w = subprocess.Popen([RILL, "watch", "t1", "--count", "1", *o],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)
        for _ in range(40):  # the subscription reaches rilld asynchronously: keep feeding
            if w.poll() is not None:
                break
            run("ingest", "t1", *o, stdin=" Alice moved.")
            time.sleep(0.25)
        out, err = w.communicate(timeout=20)
        assert w.returncode == 0, err
        assert out.startswith(f"qid {qid}  version "), out
        assert " data " in out and " age " in out, out
        run("standing", "rm", "t1", qid, *o)
        e = run("standing", "rm", "t1", qid, *o, ok=(1,)).stderr
        assert "ENOTFOUND" in e, e
        assert run("standing", "ls", "t1", *o).stdout == ""

    def t_ticks():
        run("session", "new", "mkt", *o)
        csv = os.path.join(tmp, "ticks.csv")
        with open(csv, "w") as f:
            f.write("symbol,ts,price,size,side\n# a comment\n")
            for i in range(40):
                f.write(f"AAPL,{1704205800000000000 + i * 10**9},{187 + i / 100:.2f},100,B\n")
            f.write("aapl,1704205900000000000,187.5,100,B\n")  # lower case symbol
            f.write("MSFT,1704205900000000000,-1,100,S\n")     # negative price
            f.write("MSFT,1704205900000000000,370.5\n")        # too few cells
        out = run("ingest", "mkt", "--ticks", csv, "--batch", "16", *o).stdout
        assert out.startswith("ticks 43: accepted 40, rejected 3 (3 here, 0 by the server), "
                              "lines 40, version"), out
        mp = os.path.join(tmp, "ticks.msgpack")
        with open(mp, "wb") as f:
            good = [pack_tick("NVDA", 1704206000000000000 + i, 480.5, 10) for i in range(3)]
            bad = [pack_tick("nvda", 1704206000000000009, 480.5, 10),
                   pack_tick("NVDA", 1704206000000000010, -2.0, 10)]
            f.write(bytes([0x94]) + b"".join(good[:2] + bad))  # an array of 4
            f.write(good[2])                                   # then one map
            f.write(b"\x01")                                   # not a record
        out = run("ingest", "mkt", "--ticks", mp, "--batch", "2", *o).stdout
        assert out.startswith("ticks 6: accepted 3, rejected 3 (1 here, 2 by the server)"), out
        with open(mp, "ab") as f:
            f.write(b"\xdd\xff\xff\xff\xff")  # an array that claims 4 billion elements
        e = run("ingest", "mkt", "--ticks", mp, *o, ok=(1,)).stderr
        assert "tick file" in e, e

    def t_curve():
        keys = os.path.join(tmp, "keys")
        os.makedirs(os.path.join(keys, "clients"))
        run("keygen", os.path.join(keys, "server"))
        for k in ("alice", "bob", "mallory"):
            run("keygen", os.path.join(tmp, k))
        for k in ("alice", "bob"):
            shutil.copy(os.path.join(tmp, k + ".pub"), os.path.join(keys, "clients"))
        cd = Daemon(tmp, "curve", "--curve-keys", keys)
        try:
            srv = ["--curve-server-key", os.path.join(keys, "server.pub")]
            alice = [*cd.opts(), *srv, "--curve-key", os.path.join(tmp, "alice")]
            bob = [*cd.opts(), *srv, "--curve-key", os.path.join(tmp, "bob")]
            mallory = [*cd.opts(), *srv, "--curve-key", os.path.join(tmp, "mallory"),
                       "--timeout-ms", "5000"]
            assert run("session", "new", "sec", *alice).stdout == "sec\n"
            run("ingest", "sec", *alice, stdin="Alice lives in Paris. Bob lives in Rome.")
            out = run("ask", "sec", " Bob lives in", "-n", "3", *alice).stdout
            assert "Rome" in out, out
            out = run("session", "list", *alice).stdout
            assert out.split() == ["sec"], out
            # another listed key: its own (empty) list, EPERM on alice's session
            out = run("session", "list", *bob).stdout
            assert out == "", out
            e = run("session", "stats", "sec", *bob, ok=(1,)).stderr
            assert "EPERM" in e and "not your session" in e, e
            # an unlisted key: refused at the handshake, reported at once
            t0 = time.time()
            e = run("session", "list", *mallory, ok=(1,)).stderr
            assert "EPERM" in e and "refused" in e, e
            assert time.time() - t0 < 4, time.time() - t0
            # no CURVE at all against a CURVE server: nothing gets through
            e = run("session", "list", *cd.opts(), "--timeout-ms", "500", ok=(1,)).stderr
            assert "ETIMEDOUT" in e, e
        finally:
            rc = cd.stop()
            assert rc == 0, f"the CURVE rilld exited {rc}"

    try:
        check("help_and_usage", t_help_and_usage)
        check("sessions", t_sessions)
        check("errors", t_errors)
        check("ingest_and_ask", t_ingest_and_ask)
        check("standing_and_watch", t_standing_and_watch)
        check("ticks", t_ticks)
        check("curve", t_curve)
    finally:
        rc = d.stop()
        if rc != 0:
            results.append(("rilld exit", AssertionError(f"rilld exited {rc}")))
        if os.environ.get("RILL_KEEP_TMP") is None:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("kept", tmp)
    bad = [(n, e) for n, e in results if e is not None]
    for n, e in bad:
        print(f"FAIL {n}: {e}")
    print(f"{len(results) - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
