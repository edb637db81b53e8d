#!/usr/bin/env python3
"""The translation demo (demos/translate/run.sh, what `scripts/run.sh translate FILE` runs after
its set-up and build) end to end on a small scale: the tiny qwen2 model (RILL_MODEL; its
Spanish is noise) and whisper-tiny.en on a two-sentence espeak-ng clip at 2x real time, the
captions page on a free port (RILL_HTTP). It must exit 0, print the page's address, the
transcript lines as they come, and a summary whose transcript has the clip's words and whose
captions count what was emitted; the page it names must be served while the demo runs. A
missing FILE is a clear error.

Usage: test_translate_demo.py RILL_BINARY SOURCE_DIR. Exits 77 (skip) without pyzmq/msgpack
(.venv), whisper-tiny.en, the tiny models or espeak-ng.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

RILL, SRC = sys.argv[1], sys.argv[2]
WHISPER = os.path.join(SRC, "models", "whisper-tiny.en.gguf")
QWEN = os.path.join(SRC, "tests", "data", "models", "rill-tiny-qwen2-F32.gguf")
PY = os.path.join(SRC, ".venv", "bin", "python")


def main():
    for need in (WHISPER, QWEN, PY):
        if not os.path.exists(need):
            print(f"SKIP: {need} is missing")
            return 77
    if shutil.which("espeak-ng") is None or subprocess.run(
            [PY, "-c", "import zmq, msgpack"], capture_output=True).returncode != 0:
        print("SKIP: espeak-ng, pyzmq or msgpack is missing")
        return 77
    tmp = tempfile.mkdtemp(prefix="rill-translate-demo-")
    clip = os.path.join(tmp, "two.wav")
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", clip,
                    "The birch canoe slid on the smooth planks. Glue the sheet to the dark "
                    "blue background."], check=True)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, RILL_MODEL=QWEN, RILL_ASR=WHISPER, RILL_HTTP=f"127.0.0.1:{port}",
               RILL_BUILD=os.path.dirname(os.path.dirname(os.path.abspath(RILL))),
               RILL_INSTRUCTION="Translate into Spanish.", RILL_PACE="2", RILL_POLICY="wait-2",
               RILL_DEMO_NO_WAIT="1")
    page = {}

    def fetch_page():  # while the demo streams
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/captions/talk",
                                            timeout=5) as r:
                    page["status"], page["body"] = r.status, r.read().decode()
                    return
            except OSError:
                time.sleep(0.1)

    th = threading.Thread(target=fetch_page)
    th.start()
    p = subprocess.run([os.path.join(SRC, "demos", "translate", "run.sh"), clip], env=env,
                       capture_output=True, text=True, timeout=500, stdin=subprocess.DEVNULL)
    th.join()
    out = p.stdout
    print(out)
    failed = []

    def check(what, ok):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failed.append(what)

    check("exit 0", p.returncode == 0 or print(p.stderr))
    check("the page's address", f"captions page: http://127.0.0.1:{port}/captions/talk" in out)
    check("the page was served", page.get("status") == 200 and "captions" in page.get("body", ""))
    check("transcript lines", re.search(r"^  \[en +\d+\.\d s\] \S", out, re.M) is not None)
    m = re.search(r"^  transcript +(\d+) words: (.*)$", out, re.M)
    check("the summary's transcript", m is not None and int(m.group(1)) >= 10
          and "sheet" in m.group(2))
    m2 = re.search(r"^  captions +(\d+) words in (\d+) emissions", out, re.M)
    n_es = len(re.findall(r"^  \[es ", out, re.M))
    check("the summary's captions", m2 is not None and int(m2.group(2)) == n_es and n_es > 0)
    q = subprocess.run([os.path.join(SRC, "demos", "translate", "run.sh"),
                        os.path.join(tmp, "nope.wav")], env=env, capture_output=True, text=True,
                       timeout=60)
    check("a missing FILE", q.returncode == 1 and "nope.wav: no such file" in q.stderr)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{7 - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
