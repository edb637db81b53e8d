"""The request side: `Client`, one typed method per rilld command (docs/protocol.md, Commands).

Each call packs the request ``{v: 1, id, cmd, args}`` with msgpack, sends it as one frame on a
DEALER socket connected to rilld's ROUTER, and waits for the reply that carries the same
``id``. Replies with another id (late replies of calls that timed out) are discarded and
counted in `Client.stale_replies`, never taken for this call's. A reply whose status is not
``"OK"`` raises the `RillError` subclass of its status (rill_client.errors) with rilld's
message. A reply this client cannot read (not a protocol reply map, a str that is not valid
UTF-8 anywhere in it: rilld sends only UTF-8) raises `FormatError`; one of another protocol
version `UnsupportedError`; no reply within the timeout `RillTimeout`.
"""

from __future__ import annotations

import os
import time
from dataclasses import MISSING, asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import msgpack
import zmq

from .errors import FormatError, RangeError, RillError, RillTimeout, UnsupportedError, error_for
from .events import Events
from .keys import load_key

__all__ = ["Client", "Answer", "StandingQuery", "Tick", "DEFAULT_REQUESTS", "DEFAULT_EVENTS",
           "PROTOCOL_VERSION"]

DEFAULT_REQUESTS = "tcp://127.0.0.1:7781"  #: rilld's ROUTER by default
DEFAULT_EVENTS = "tcp://127.0.0.1:7782"  #: rilld's XPUB by default
PROTOCOL_VERSION = 1

_REPLY_KEYS = frozenset(("v", "id", "status", "message", "result"))
_ID_LIMIT = 1 << 63
_AUDIO_MAX = 1 << 20  # ingest.audio's data at most 1 MiB (docs/protocol.md)
_AUDIO_INTS = ("samples", "lost", "concealed_ms", "expected", "queue_free")

KeyArg = Union[str, bytes, "os.PathLike[str]"]


@dataclass
class Answer:
    """The result of `Client.ask`: ``answer`` (the text, leading blanks and the end marker
    trimmed), ``tokens`` (decoded), ``version`` (the session's data version it saw),
    ``context`` (tokens in its context), ``ttft_ms`` and ``total_ms`` (time to the first token
    and to the end, ms), ``cached`` (answered from a standing query's cache), and what
    ``ttft_ms`` was made of: ``backlog`` (tokens it waited to be evaluated) and
    ``ttft_compute_ms`` (engine time of those steps) - None from a rilld that sends neither;
    ``consistency`` ("acknowledged" or "evaluated", None from a rilld without it).
    ``raw`` is the whole result map (fields a later rilld adds are there)."""

    answer: str
    tokens: int
    version: int
    context: int
    ttft_ms: float
    total_ms: float
    cached: bool
    backlog: Optional[int] = None
    ttft_compute_ms: Optional[float] = None
    consistency: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class StandingQuery:
    """One entry of `Client.standing_list`: ``qid``, ``question``, ``version`` (data version
    of its latest answer), ``age_ms`` (since that answer was computed), ``refreshes``,
    ``abandoned`` (refreshes given up), ``cache_hits`` (asks it answered), ``answer`` (the
    latest answer published, None before the first or from a rilld that does not send it) and
    ``answer_version`` (its data version, -1 before); ``raw`` the map."""

    qid: int
    question: str
    version: int
    age_ms: float
    refreshes: int
    abandoned: int
    cache_hits: int
    answer: Optional[str] = None
    answer_version: int = -1
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Completion:
    """The result of `Client.complete`: ``text``, ``finish_reason`` ("stop": an
    end-of-generation token or a stop string; "length": max_tokens reached),
    ``prompt_tokens``, ``completion_tokens`` and ``model`` (the model's name); ``raw`` the
    map."""

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    model: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Tick:
    """A market tick for `Client.ingest_ticks` (wire/rill_tick.h): ``symbol``, ``ts``
    (nanoseconds since the epoch), ``price``, ``size``, ``side`` ("B", "S" or None: not
    sent). Plain dicts with these keys are taken as well."""

    symbol: str
    ts: int
    price: float
    size: int
    side: Optional[str] = None

    def to_wire(self) -> Dict[str, Any]:
        """The tick map as sent."""
        return {k: v for k, v in asdict(self).items() if v is not None}


def _pick(cls: Any, m: Any, cmd: str) -> Any:
    """Builds dataclass `cls` from result map `m`; raises FormatError when a field that has no
    default is missing."""
    if not isinstance(m, dict):
        raise FormatError("EFORMAT", f"result is {type(m).__name__}, not a map", cmd)
    kw = {}
    for name, f in cls.__dataclass_fields__.items():
        if name == "raw":
            continue
        if name in m:
            kw[name] = m[name]
        elif f.default is MISSING and f.default_factory is MISSING:  # a required field
            raise FormatError("EFORMAT", f"result lacks '{name}'", cmd)
    return cls(**kw, raw=m)


class Client:
    """A connection to one rilld: the DEALER for requests and, through `events`, SUB sockets
    for events.

    ``Client(requests="tcp://127.0.0.1:7781", events="tcp://127.0.0.1:7782", timeout=30.0,
    server_key=None, public_key=None, secret_key=None)``:

    - `requests`, `events`: rilld's ``--listen`` and ``--events`` endpoints;
    - `timeout`: seconds a call waits for its connection and reply (> 0);
    - CURVE (all three or none): `server_key` rilld's public key (``DIR/server.pub`` of
      ``rill keygen DIR/server``), `public_key` and `secret_key` this client's pair (its
      ``.pub`` listed in rilld's ``--curve-keys DIR/clients/``). Each is the key's 40 Z85
      characters or the path of a key file (rill_client.keys). Each session belongs to the
      key that created it;
    - `max_request`: the largest request sent, bytes (rilld's ``--max-msg``, default 1 MiB,
      beyond which rilld drops the connection): a larger one raises `RangeError` unsent;
    - `max_msg`: the largest reply or event frame accepted, bytes (larger ones are dropped
      by ZeroMQ, so the call times out);
    - `context`: the zmq.Context to use (default: the process's shared instance).

    Raises `RillError` (RILL_EINVAL) for a bad endpoint, timeout or partial CURVE keys, and
    what rill_client.keys raises for a key that cannot be read. The connection itself is
    made in the background; the first call waits for it (at most `timeout`).

    Ownership: the client owns its DEALER; `close` (or the end of a ``with`` block) closes
    it. Thread safety: one thread at a time per client (ZeroMQ sockets are not thread-safe);
    use one client per thread. Events iterators are independent of the client once made.
    """

    def __init__(self, requests: str = DEFAULT_REQUESTS, events: str = DEFAULT_EVENTS, *,
                 timeout: float = 30.0, server_key: Optional[KeyArg] = None,
                 public_key: Optional[KeyArg] = None, secret_key: Optional[KeyArg] = None,
                 max_request: int = 1 << 20, max_msg: int = 16 << 20,
                 context: Optional[zmq.Context] = None):
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or \
                not timeout > 0:
            raise RillError("EINVAL", f"timeout must be > 0 seconds, not {timeout!r}")
        if max_request < 1024 or max_msg < 1024:
            raise RillError("EINVAL", "max_request and max_msg are at least 1024 bytes")
        keys = (server_key, public_key, secret_key)
        if any(k is not None for k in keys) and not all(k is not None for k in keys):
            raise RillError("EINVAL", "CURVE needs server_key, public_key and secret_key "
                                      "together")
        self.curve: Optional[Dict[str, str]] = None
        if server_key is not None:
            self.curve = {"server": load_key(server_key, "server_key"),
                          "public": load_key(public_key, "public_key"),  # type: ignore
                          "secret": load_key(secret_key, "secret_key")}  # type: ignore
        self.requests_endpoint = requests
        self.events_endpoint = events
        self.timeout = float(timeout)
        self.max_request = max_request
        self.max_msg = max_msg
        self.context = context or zmq.Context.instance()
        self.stale_replies = 0  #: replies discarded because they carried another id
        self.last_request_id = 0  #: the id of the last request sent (a token event's rid)
        self._next_id = 1
        sock = self.context.socket(zmq.DEALER)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, max_msg)
            # a DEALER queues to connected peers only: without one, sending must not block
            sock.setsockopt(zmq.IMMEDIATE, 1)
            if self.curve is not None:
                sock.curve_serverkey = self.curve["server"].encode()
                sock.curve_publickey = self.curve["public"].encode()
                sock.curve_secretkey = self.curve["secret"].encode()
            sock.connect(requests)
        except zmq.ZMQError as e:
            sock.close(0)
            raise RillError("EINVAL", f"{requests}: {e}") from None
        self._sock: Optional[zmq.Socket] = sock

    # ---- life -------------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the DEALER (a reply still on its way is lost). Idempotent."""
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ---- the one request path ---------------------------------------------------------------

    def call(self, cmd: str, args: Optional[Mapping[str, Any]] = None,
             timeout: Optional[float] = None) -> Any:
        """Sends command `cmd` with `args` (None: no ``args`` key) and returns the reply's
        ``result`` as msgpack decodes it (maps are dicts, strs are str). The typed methods
        below use it; it is public for commands this client has no method for. `timeout`:
        seconds, default the client's. Raises as the top of this module says."""
        if self._sock is None:
            raise RillError("ECLOSED", "the client is closed", cmd)
        wait = self.timeout if timeout is None else float(timeout)
        if not wait > 0:
            raise RillError("EINVAL", f"timeout must be > 0 seconds, not {timeout!r}", cmd)
        rid = self._next_id
        self._next_id = 1 if rid + 1 >= _ID_LIMIT else rid + 1
        req: Dict[str, Any] = {"v": PROTOCOL_VERSION, "id": rid, "cmd": cmd}
        if args is not None:
            req["args"] = dict(args)
        try:
            frame = msgpack.packb(req, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as e:
            raise RillError("EINVAL", f"arguments cannot be packed: {e}", cmd) from None
        if len(frame) > self.max_request:
            raise RangeError("ERANGE", f"request of {len(frame)} bytes is over max_request "
                                       f"({self.max_request})", cmd)
        deadline = time.monotonic() + wait
        while True:
            try:
                self._sock.send(frame, zmq.NOBLOCK)
                break
            except zmq.Again:
                if time.monotonic() >= deadline:
                    raise RillTimeout("ETIMEDOUT", f"no connection to {self.requests_endpoint}"
                                                   f" within {wait} s", cmd) from None
                self._sock.poll(20, zmq.POLLOUT)
        self.last_request_id = rid
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sock.poll(max(1, int(left * 1000))):
                raise RillTimeout("ETIMEDOUT", f"no reply within {wait} s", cmd)
            frames = self._sock.recv_multipart()
            reply = self._decode(frames, cmd)
            if reply["id"] != rid:
                self.stale_replies += 1
                continue
            if reply["status"] != "OK":
                raise error_for(reply["status"], reply["message"], cmd)
            return reply["result"]

    def _decode(self, frames: List[bytes], cmd: str) -> Dict[str, Any]:
        if not (len(frames) == 1 or (len(frames) == 2 and frames[0] == b"")):
            raise FormatError("EFORMAT", f"a reply of {len(frames)} frames", cmd)
        try:
            r = msgpack.unpackb(frames[-1], raw=False, unicode_errors="strict",
                                strict_map_key=True)
        except UnicodeDecodeError:
            raise FormatError("EFORMAT", "a reply with a str that is not valid UTF-8",
                              cmd) from None
        except Exception as e:  # ExtraData, FormatError, StackError, ValueError, ...
            raise FormatError("EFORMAT", f"a reply that is not msgpack ({e})", cmd) from None
        if not isinstance(r, dict):
            raise FormatError("EFORMAT", "a reply that is not a map", cmd)
        if "v" in r and r["v"] != PROTOCOL_VERSION:
            raise UnsupportedError("EUNSUPPORTED", f"a reply of protocol version {r['v']!r}",
                                   cmd)
        if set(r) != _REPLY_KEYS or not isinstance(r["id"], int) or \
                isinstance(r["id"], bool) or not isinstance(r["status"], str) or \
                not isinstance(r["message"], str):
            raise FormatError("EFORMAT", f"not a protocol reply: keys {sorted(map(str, r))}",
                              cmd)
        return r

    @staticmethod
    def _args(**kw: Any) -> Dict[str, Any]:
        return {k: v for k, v in kw.items() if v is not None}

    # ---- sessions ---------------------------------------------------------------------------

    def session_create(self, name: Optional[str] = None, model: Optional[str] = None,
                       window: Optional[int] = None, sinks: Optional[int] = None,
                       system: Optional[str] = None) -> str:
        """Creates a session and returns its name. `name`: 1..64 of ``[A-Za-z0-9_.-]``
        (None: rilld picks ``s<N>``); `model`: one of `server_stats` ``models`` (None: the
        default); `window`: tokens kept (0: no window; None: rilld's default), `sinks`: first
        tokens always kept; `system`: a system prompt (sessions of one model with the same
        one share its pages). Raises `ExistsError` (name taken), `InvalidArgumentError` (a
        bad name), `NotFoundError` (no such model), `RangeError` (window), `FullError`."""
        r = self.call("session.create", self._args(session=name, model=model, window=window,
                                                   sinks=sinks, system=system))
        if not isinstance(r, dict) or not isinstance(r.get("session"), str):
            raise FormatError("EFORMAT", "session.create result lacks 'session'",
                              "session.create")
        return r["session"]

    def session_close(self, session: str) -> None:
        """Closes `session` and deletes its files (its name is free again, but under CURVE
        it stays its owner's). Raises `NotFoundError`, `NotPermittedError`."""
        self.call("session.close", {"session": session})

    def session_list(self) -> List[str]:
        """The names of this caller's sessions (under CURVE: this key's)."""
        r = self.call("session.list")
        if not isinstance(r, list):
            raise FormatError("EFORMAT", "session.list result is not an array", "session.list")
        return r

    def session_stats(self, session: str) -> Dict[str, Any]:
        """`session`'s figures as rilld sends them (docs/protocol.md): ``version``,
        ``n_seen``, ``n_resident``, ``n_pending``, ``pages``, ``bytes``, ``window``,
        ``sinks``, ``standing``, ``held_text``, ``model``, ... Raises `NotFoundError`,
        `NotPermittedError`."""
        r = self.call("session.stats", {"session": session})
        if not isinstance(r, dict):
            raise FormatError("EFORMAT", "session.stats result is not a map", "session.stats")
        return r

    def session_snapshot(self, session: str) -> str:
        """Writes `session`'s snapshot now and returns its path (in rilld's state directory,
        on rilld's machine). Raises `NotFoundError`, `NotPermittedError`, `RillError`
        (RILL_EIO)."""
        r = self.call("session.snapshot", {"session": session})
        if not isinstance(r, dict) or not isinstance(r.get("path"), str):
            raise FormatError("EFORMAT", "session.snapshot result lacks 'path'",
                              "session.snapshot")
        return r["path"]

    # ---- ingest -----------------------------------------------------------------------------

    def ingest_text(self, session: str, text: str, flush: bool = False) -> int:
        """Appends `text` to `session` and returns the data version this input made (the
        reply means logged and queued, not yet evaluated; a question asked afterwards waits
        for it). Without `flush` an unstable end (a word more text could continue) is held
        back until more text or a flush comes; with it, the text and its end are one input.
        Raises `NotFoundError`, `NotPermittedError`, `FullError` (back-pressure),
        `FormatError` (text not a str)."""
        return self._version("ingest.text",
                             {"session": session, "text": text, "flush": bool(flush)})

    def ingest_replace(self, session: str, from_version: int, text: str) -> int:
        """"From the input that made version `from_version` on, the text is `text`": rolls
        `session` back to where those inputs began and ingests `text` instead; returns the
        replace's own version. Raises `InvalidArgumentError` (not one of the session's
        versions), `RangeError` (the session no longer reaches back that far), `FullError`,
        `NotFoundError`, `NotPermittedError`."""
        return self._version("ingest.replace",
                             {"session": session, "from_version": from_version, "text": text})

    def ingest_ticks(self, session: str,
                     ticks: Iterable[Union[Tick, Mapping[str, Any]]]) -> Dict[str, Any]:
        """Ingests market ticks (`Tick` records or maps with ``symbol``, ``ts``, ``price``,
        ``size``, ``side``; at most 4096) through rilld's rate governor and returns
        ``{version, accepted, rejected, lines}``: malformed ticks are counted in
        ``rejected`` and skipped. Raises `RangeError` (more than 4096), `FormatError`
        (`ticks` not an array), `NotFoundError`, `NotPermittedError`, `FullError`."""
        wire: Any = ticks
        if not isinstance(ticks, (str, bytes, Mapping)):
            wire = [t.to_wire() if isinstance(t, Tick) else t for t in ticks]
        r = self.call("ingest.ticks", {"session": session, "ticks": wire})
        if not isinstance(r, dict) or "version" not in r:
            raise FormatError("EFORMAT", "ingest.ticks result lacks 'version'", "ingest.ticks")
        return r

    def ingest_audio(self, session: str, data: Optional[bytes] = None, *,
                     codec: str = "pcm16", rate: int = 16000, channels: int = 1,
                     seq: Optional[int] = None, flush: bool = False) -> Dict[str, Any]:
        """Sends one packet of `session`'s audio stream (a session with a recognizer:
        `session_create` on a Whisper model, docs/protocol.md "Speech sessions"): `data` is
        one Opus packet (``codec="opus"``; `rate` 8000, 12000, 16000, 24000 or 48000;
        `channels` 1 or 2) or little-endian 16-bit interleaved frames, 1 ms to 1 s
        (``"pcm16"``; any `rate` of 8..384 kHz, 1..32 `channels`), at most 1 MiB; `seq` counts
        the stream's packets (required with data: gaps are concealed, repeats dropped).
        ``data=None`` sends no packet, only the flush (then `flush` must be true). `flush` ends
        the stream after the packet: the recognizer commits its tail (a final transcript
        event) and the next packet starts a new stream. Returns ``{samples, packet, lost,
        concealed_ms, expected, queue_free}``. Raises `InvalidArgumentError` (data that is not
        bytes, no seq, neither a packet nor flush; nothing sent; or a packet that does not
        match its stream), `RangeError` (over 1 MiB, nothing sent; or a rate or channel count
        the codec does not take), `UnsupportedError` (no recognizer, another codec),
        `FormatError` (a malformed packet), `FullError` (the recognizer's queue is full: send
        the same packet again later), `NotFoundError`, `NotPermittedError`."""
        args: Dict[str, Any] = {"session": session}
        if data is not None:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise error_for("EINVAL", "ingest_audio: data must be bytes", "ingest.audio")
            if seq is None:
                raise error_for("EINVAL", "ingest_audio: a packet needs its seq", "ingest.audio")
            if len(data) > _AUDIO_MAX:
                raise RangeError("ERANGE", f"ingest_audio: a packet of {len(data)} bytes "
                                 f"(at most {_AUDIO_MAX})", "ingest.audio")
            args.update(codec=codec, rate=rate, channels=channels, seq=seq, data=bytes(data))
        elif not flush:
            raise error_for("EINVAL", "ingest_audio: neither a packet nor flush: nothing to send",
                            "ingest.audio")
        if flush:
            args["flush"] = True
        r = self.call("ingest.audio", args)
        if not isinstance(r, dict) or not all(isinstance(r.get(k), int) for k in _AUDIO_INTS) \
                or not isinstance(r.get("packet"), str):
            raise FormatError("EFORMAT", "ingest.audio result lacks a field", "ingest.audio")
        return r

    def _version(self, cmd: str, args: Dict[str, Any]) -> int:
        r = self.call(cmd, args)
        if not isinstance(r, dict) or not isinstance(r.get("version"), int):
            raise FormatError("EFORMAT", f"{cmd} result lacks 'version'", cmd)
        return r["version"]

    # ---- questions --------------------------------------------------------------------------

    def ask(self, session: str, question: str, max_tokens: Optional[int] = None,
            timeout: Optional[float] = None, consistency: Optional[str] = None) -> Answer:
        """Puts `question` to `session`'s data and returns the `Answer` once it is complete
        (`max_tokens`: 1..1024, rilld's default 48). Meanwhile its pieces are published as
        ``token`` events (`events`) with ``rid`` == `last_request_id`. `timeout`: seconds
        for this call (default the client's). `consistency`: "acknowledged" (rilld's
        default: the answer sees every input acknowledged before the question) or
        "evaluated" (answer at once on what the engine has evaluated; ``version`` and
        ``backlog`` say what it saw). Raises `InvalidArgumentError` (empty question, unknown
        consistency), `RangeError` (max_tokens), `NotFoundError`, `NotPermittedError`,
        `RillTimeout`."""
        r = self.call("ask", self._args(session=session, question=question,
                                        max_tokens=max_tokens, consistency=consistency),
                      timeout)
        return _pick(Answer, r, "ask")

    def standing_register(self, session: str, question: str,
                          max_tokens: Optional[int] = None) -> int:
        """Registers a standing query on `session` and returns its qid: rilld answers it now
        and again after new data, publishing each answer as a ``standing`` event. Replies
        once the query is on disk. Raises as `ask`, and `RillError` (RILL_EIO)."""
        r = self.call("standing.register", self._args(session=session, question=question,
                                                      max_tokens=max_tokens))
        if not isinstance(r, dict) or not isinstance(r.get("qid"), int):
            raise FormatError("EFORMAT", "standing.register result lacks 'qid'",
                              "standing.register")
        return r["qid"]

    def standing_unregister(self, session: str, qid: int) -> None:
        """Removes standing query `qid` of `session`. Raises `NotFoundError` (no such query
        or session), `NotPermittedError`, `RillError` (RILL_EIO: it stays)."""
        self.call("standing.unregister", {"session": session, "qid": qid})

    def standing_list(self, session: str) -> List[StandingQuery]:
        """`session`'s standing queries. Raises `NotFoundError`, `NotPermittedError`."""
        r = self.call("standing.list", {"session": session})
        if not isinstance(r, list):
            raise FormatError("EFORMAT", "standing.list result is not an array",
                              "standing.list")
        return [_pick(StandingQuery, q, "standing.list") for q in r]

    def complete(self, prompt: Optional[str] = None,
                 messages: Optional[Sequence[Mapping[str, str]]] = None, *,
                 model: Optional[str] = None, max_tokens: Optional[int] = None,
                 temperature: Optional[float] = None, top_p: Optional[float] = None,
                 seed: Optional[int] = None, stop: Optional[Sequence[str]] = None,
                 timeout: Optional[float] = None) -> Completion:
        """A stateless completion (the command ``complete``, what rilld's OpenAI routes run):
        `prompt` text, or chat `messages` ({"role": "system"|"user"|"assistant", "content"})
        rendered with the model's chat template - exactly one of the two. `model`: a loaded
        model's name (default rilld's first); `max_tokens` 1..1024 (default 256);
        `temperature` 0..2 (default 1; 0 greedy); `top_p` (0, 1]; `seed` (default: rilld's
        clock); `stop`: at most 4 strings that end the text (not included). Raises
        `InvalidArgumentError` (both or neither of prompt and messages, a bad role),
        `RangeError` (a number out of range, a prompt that does not fit), `NotFoundError` (no
        such model), `UnsupportedError` (messages for a model without a chat template),
        `RillTimeout`."""
        args = self._args(prompt=prompt, model=model, max_tokens=max_tokens,
                          temperature=temperature, top_p=top_p, seed=seed)
        if messages is not None:
            args["messages"] = [dict(m) for m in messages]
        if stop is not None:
            args["stop"] = list(stop)
        return _pick(Completion, self.call("complete", args, timeout), "complete")

    # ---- the server -------------------------------------------------------------------------

    def server_metrics(self) -> str:
        """rilld's figures in the Prometheus text format (what ``GET /metrics`` serves; the
        metric names are in docs/protocol.md, Metrics)."""
        r = self.call("server.metrics")
        if not isinstance(r, dict) or not isinstance(r.get("text"), str):
            raise FormatError("EFORMAT", "server.metrics result lacks 'text'", "server.metrics")
        return r["text"]

    def server_stats(self) -> Dict[str, Any]:
        """rilld's figures (docs/protocol.md): ``sessions``, ``requests``, ``bad_requests``,
        ``events``, ``event_drops``, ``reply_drops``, ``engine_drops``, engine figures and
        ``models`` (the default first)."""
        r = self.call("server.stats")
        if not isinstance(r, dict):
            raise FormatError("EFORMAT", "server.stats result is not a map", "server.stats")
        return r

    # ---- events -----------------------------------------------------------------------------

    def events(self, session: str, kinds: Optional[Sequence[str]] = None, *,
               timeout: Optional[float] = None, rcvhwm: Optional[int] = None,
               last_seq: Optional[Mapping[str, int]] = None) -> Events:
        """An iterator over `session`'s events (rill_client.events.Events): of the `kinds`
        given (e.g. ``["token", "answer"]``; None: all), with `Gap` records where events were
        lost. Each ``next()`` waits at most `timeout` seconds (default: the client's; raises
        `RillTimeout`). `rcvhwm`: the SUB socket's receive high-water mark (messages it
        queues before ZeroMQ drops). `last_seq`: where topics stood (an earlier iterator's
        ``last_seq``), so that events published in between show as a `Gap`. The iterator
        has its own socket with this client's endpoint and CURVE keys; the caller owns it
        (``with client.events(...) as ev:``). Subscribe after `session_create` has replied,
        and give the subscription a moment to reach rilld before the events you want."""
        return Events(self.context, self.events_endpoint, session, kinds,
                      timeout=self.timeout if timeout is None else timeout, curve=self.curve,
                      max_msg=self.max_msg, rcvhwm=rcvhwm, last_seq=last_seq)
