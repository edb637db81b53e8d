"""Starting rilld for the Python tests: free loopback ports, a ready file, a log per start.

    with Rilld(rilld_binary, model, state_dir, "--flag", ..., http=True) as d:
        d.req_ep, d.ev_ep       # ZeroMQ endpoints
        d.http                  # "http://127.0.0.1:PORT" with http=True

Each start picks free ports (and retries when a parallel test took one meanwhile), so tests run
alone or side by side. Used by test_server.py, test_http.py and the other daemon tests.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time
import traceback


def model_path(src):
    """The model the daemon tests run: $RILL_MODEL, or the default model set-up links into
    SRC/models."""
    return os.environ.get("RILL_MODEL") or os.path.join(src, "models",
                                                         "SmolLM2-135M-Instruct.Q4_1.gguf")


def model_name(path):
    """The name rilld gives a model passed as a bare FILE: the file's name without ".gguf",
    other characters than [A-Za-z0-9_.-] turned into '_' (rill_server.h)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", re.sub(r"\.gguf$", "", os.path.basename(path)))


def rilld_path(rill):
    """rilld, built next to the rill binary."""
    return os.path.join(os.path.dirname(os.path.abspath(rill)), "rilld")


def keygen(rill, prefix):
    """`rill keygen PREFIX`: writes PREFIX.pub and PREFIX.key; returns their Z85 texts."""
    p = subprocess.run([rill, "keygen", prefix], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    pub = open(prefix + ".pub").read().strip()
    sec = open(prefix + ".key").read().strip()
    assert p.stdout.strip() == pub and len(pub) == 40 and len(sec) == 40, (p.stdout, pub)
    return pub, sec


def free_ports(n):
    """n distinct free loopback TCP ports (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Rilld:
    """One rilld process on free ports. Use as a context manager: it is killed on exit."""

    def __init__(self, binary, model, state, *extra, host="127.0.0.1", events=None, http=False,
                 threads=1, kv_cells=16384):
        self.binary, self.model, self.state, self.extra = binary, model, state, list(extra)
        self.host, self.events, self.want_http = host, events, http
        self.threads, self.kv_cells = threads, kv_cells
        self.proc = None
        self.logs = []
        self.http = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.kill()

    def start(self, expect_exit=False):
        for attempt in range(5):
            rp, ep, hp = free_ports(3)
            self.req_ep = f"tcp://127.0.0.1:{rp}"
            self.ev_ep = self.events or f"tcp://127.0.0.1:{ep}"
            base = os.path.dirname(os.path.abspath(self.state))
            ready = os.path.join(base, f"ready-{rp}")
            if os.path.exists(ready):
                os.unlink(ready)
            log = os.path.join(base, f"rilld-{rp}-{len(self.logs)}.log")
            self.logs.append(log)
            cmd = [self.binary, "--model", self.model, "--threads", str(self.threads),
                   "--kv-cells", str(self.kv_cells), "--state", self.state,
                   "--listen", f"tcp://{self.host}:{rp}",
                   "--events", self.events or f"tcp://{self.host}:{ep}", "--ready-file", ready]
            if self.want_http:
                self.http = f"http://127.0.0.1:{hp}"
                cmd += ["--http", f"127.0.0.1:{hp}"]
            cmd += self.extra
            with open(log, "w") as lf:
                self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=lf)
            deadline = time.time() + 60
            while time.time() < deadline:
                if os.path.exists(ready) and open(ready).read().endswith("\n"):
                    return self
                if self.proc.poll() is not None:
                    break
                time.sleep(0.02)
            if self.proc.poll() is None:
                self.kill()
                raise AssertionError(f"rilld did not get ready in 60 s:\n{self.log()}")
            if expect_exit:
                return self
            if "cannot bind" in self.log() or "cannot serve HTTP" in self.log():
                continue  # a port was taken meanwhile (parallel tests): try others
            raise AssertionError(f"rilld exited with {self.proc.returncode}:\n{self.log()}")
        raise AssertionError("rilld: no free ports")

    def log(self):
        return open(self.logs[-1]).read() if self.logs else ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=60):
        """SIGTERM; returns the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("rilld did not stop on SIGTERM:\n" + self.log())

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_tests(tests, only):
    """Runs tests (name -> function of no arguments; an exception fails it) in name order, or
    those named in only; prints each one's time, then ok/FAIL per test and 'N passed, N failed'.
    Returns the exit code: 0, 1 when one failed, 2 for an unknown name."""
    for name in only:
        if name not in tests:
            print(f"unknown test {name} (tests: {', '.join(sorted(tests))})")
            return 2
    sys.stdout.reconfigure(line_buffering=True)
    results = []
    for name in only or sorted(tests):
        t = time.time()
        try:
            tests[name]()
            results.append((name, None))
        except Exception as e:  # noqa: BLE001 - every failure is reported
            traceback.print_exc()
            results.append((name, e))
        print(f"  {name}: {time.time() - t:.1f} s", flush=True)
    for name, err in results:
        print(("ok   " if err is None else "FAIL ") + name + ("" if err is None else f": {err}"))
    bad = sum(1 for _, e in results if e is not None)
    print(f"{len(results) - bad} passed, {bad} failed")
    return 1 if bad else 0
