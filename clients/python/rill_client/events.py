"""Events rilld pushes on its XPUB socket (docs/protocol.md, Events), as typed records, and the
iterator over them with gap detection.

An event is two frames: the topic ``<session>/<kind>`` and a msgpack map with ``v``, ``seq``
(per topic, from 1, no gaps unless events were lost), ``session``, ``kind`` and the kind's
fields. `EventParser` turns frames into records:

- `TokenEvent` (kind ``token``): one piece of an answer being decoded;
- `AnswerEvent` (``answer``): the end of an ask, with the whole answer;
- `StandingEvent` (``standing``): a standing query's refreshed answer;
- `TranscriptEvent` (``transcript``): a speech session's transcript;
- `Event`: any other kind (its fields in ``fields``), so a newer rilld's events still come
  through.

Every record has ``topic``, ``session``, ``kind``, ``seq`` and ``raw`` (the whole payload map).

Gap detection: the parser remembers the last ``seq`` of every topic. When an event's ``seq`` is
more than one past it, the events between were lost (a subscriber whose queue rilld's XPUB
dropped from, a reconnection, events published before a resumed iterator subscribed) and the
parser yields a `Gap` record (``topic``, ``expected``, ``got``) right before that event:
nothing is hidden, and the caller decides (re-read ``session.stats`` or ``standing.list``,
or carry on). The first event seen on a topic yields no gap unless the parser was given where
that topic stood (``last_seq``); an event whose ``seq`` is not above the last one (rilld
restarted and numbers from 1 again) restarts the count without a gap.

A frame pair that is not a well-formed event (not two frames, a topic that is not
``<session>/<kind>`` or disagrees with the payload, a payload that is not a map with an
unsigned ``seq``, a str that is not valid UTF-8: rilld sends only UTF-8) is skipped and
counted in ``bad_events``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import msgpack
import zmq

from .errors import RillError, RillTimeout

__all__ = [
    "Event",
    "TokenEvent",
    "AnswerEvent",
    "StandingEvent",
    "TranscriptEvent",
    "Gap",
    "EventParser",
    "Events",
    "KINDS",
]

#: the kinds rilld publishes today (a subscription to others is allowed: it just stays silent)
KINDS = ("token", "answer", "standing", "transcript")


@dataclass
class Event:
    """An event of a kind without a record of its own: its payload fields other than
    ``v``, ``seq``, ``session`` and ``kind`` are in ``fields``."""

    topic: str
    session: str
    kind: str
    seq: int
    raw: Dict[str, Any] = field(repr=False)
    fields: Dict[str, Any] = field(default_factory=dict)


@dataclass
class TokenEvent:
    """``<session>/token``: one piece of an answer (whole UTF-8 characters). ``rid`` is the
    request id of the ask it belongs to (`Client.last_request_id` right after the call was
    sent; two clients' asks on one session may share one)."""

    topic: str
    session: str
    kind: str
    seq: int
    raw: Dict[str, Any] = field(repr=False)
    rid: int = 0
    piece: str = ""


@dataclass
class AnswerEvent:
    """``<session>/answer``: an ask is complete. The fields are those of the `Answer` the ask
    call returns (``backlog`` and ``ttft_compute_ms`` None when rilld did not send them)."""

    topic: str
    session: str
    kind: str
    seq: int
    raw: Dict[str, Any] = field(repr=False)
    rid: int = 0
    answer: str = ""
    ttft_ms: float = 0.0
    total_ms: float = 0.0
    version: int = 0
    backlog: Optional[int] = None
    ttft_compute_ms: Optional[float] = None


@dataclass
class StandingEvent:
    """``<session>/standing``: standing query ``qid`` (its ``question`` as registered) has a
    new ``answer``, computed on data ``version`` in ``compute_ms`` ms, ``age_ms`` ago;
    ``data_version`` is the session's version when it was published."""

    topic: str
    session: str
    kind: str
    seq: int
    raw: Dict[str, Any] = field(repr=False)
    qid: int = 0
    question: str = ""
    answer: str = ""
    version: int = 0
    compute_ms: float = 0.0
    age_ms: float = 0.0
    data_version: int = 0


@dataclass
class TranscriptEvent:
    """``<session>/transcript``: the words an update of a speech session's transcript
    ``committed`` (never taken back: append them to what came before), its whole
    ``tentative`` tail now, after ``audio_s`` seconds of audio; ``final`` for a flush's update
    (the tail committed); ``version`` the session's data version after it (-1 for a
    transcript-only session); ``status`` ``"OK"`` or the error's name, ``message`` its
    detail."""

    topic: str
    session: str
    kind: str
    seq: int
    raw: Dict[str, Any] = field(repr=False)
    committed: str = ""
    tentative: str = ""
    audio_s: float = 0.0
    final: bool = False
    version: int = -1
    status: str = "OK"
    message: str = ""


@dataclass(frozen=True)
class Gap:
    """Events were lost on ``topic``: the next one expected was ``expected``, the one that
    came is ``got`` (so ``got - expected`` events are missing). Yielded right before the
    event numbered ``got``."""

    topic: str
    expected: int
    got: int

    @property
    def missing(self) -> int:
        """How many events are missing."""
        return self.got - self.expected


AnyEvent = Union[Event, TokenEvent, AnswerEvent, StandingEvent, TranscriptEvent]
Item = Union[AnyEvent, Gap]

_RECORDS = {"token": TokenEvent, "answer": AnswerEvent, "standing": StandingEvent,
            "transcript": TranscriptEvent}
_HEAD = ("v", "seq", "session", "kind")


def _is_uint(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


class EventParser:
    """Frames to records, with per-topic gap detection (see the top of this module). Holds
    no socket: `Events` feeds it what its SUB socket receives, and a caller (a test, a
    different transport) can feed it frames of its own. Not thread-safe."""

    def __init__(self, last_seq: Optional[Mapping[str, int]] = None):
        """`last_seq`: where topics stand already (topic -> the last seq seen), e.g. an
        earlier iterator's `last_seq`, so that events lost in between show as a `Gap`."""
        self.last_seq: Dict[str, int] = dict(last_seq or {})
        self.bad_events = 0  #: frame pairs skipped as malformed
        self.gaps = 0  #: Gap records produced
        self.missed = 0  #: events the gaps say were lost, in all

    def feed(self, frames: Sequence[bytes]) -> List[Item]:
        """Parses one received message (the topic frame and the payload frame) and returns
        what it yields: ``[]`` (malformed: counted in ``bad_events``), ``[event]`` or
        ``[Gap, event]``."""
        ev = self._decode(frames)
        if ev is None:
            self.bad_events += 1
            return []
        out: List[Item] = []
        last = self.last_seq.get(ev.topic)
        if last is not None and ev.seq > last + 1:
            out.append(Gap(ev.topic, last + 1, ev.seq))
            self.gaps += 1
            self.missed += ev.seq - last - 1
        self.last_seq[ev.topic] = ev.seq
        out.append(ev)
        return out

    def _decode(self, frames: Sequence[bytes]) -> Optional[AnyEvent]:
        if len(frames) != 2:
            return None
        try:
            topic = bytes(frames[0]).decode("utf-8")
            payload = msgpack.unpackb(bytes(frames[1]), raw=False, unicode_errors="strict",
                                      strict_map_key=True)
        except (UnicodeDecodeError, ValueError, msgpack.ExtraData, msgpack.FormatError,
                msgpack.StackError, TypeError):
            return None
        if not isinstance(payload, dict):
            return None
        session, sep, kind = topic.rpartition("/")
        if not sep or not session or not kind:
            return None
        if payload.get("session") != session or payload.get("kind") != kind:
            return None
        seq = payload.get("seq")
        if not _is_uint(seq) or seq == 0 or payload.get("v") != 1:
            return None
        cls = _RECORDS.get(kind)
        if cls is None:
            rest = {k: v for k, v in payload.items() if k not in _HEAD}
            return Event(topic, session, kind, seq, payload, rest)
        kw: Dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in ("topic", "session", "kind", "seq", "raw"):
                continue
            if f.name in payload:
                kw[f.name] = payload[f.name]
        try:
            return cls(topic, session, kind, seq, payload, **kw)
        except TypeError:
            return None


class Events:
    """An iterator over one session's events (`Client.events` makes one): its own SUB socket,
    connected to rilld's XPUB with the client's endpoint and CURVE keys, subscribed to
    ``<session>/<kind>`` for each kind asked for (all kinds: ``<session>/``).

    ``for item in events:`` yields event records and `Gap` records (see the top of this
    module); each ``next()`` waits at most `timeout` seconds (None: for ever) and raises
    `RillTimeout` when nothing came. `poll` is the same with its own timeout, returning None
    instead of raising. The iterator ends (StopIteration) only once `close` was called.

    A subscription reaches rilld shortly after the socket connects, asynchronously; events
    published before then are not received (ZeroMQ does not say when it has arrived). Under
    CURVE rilld accepts a subscription only to a session the key owns, checked when the
    subscription arrives: create the session first. Ownership: the Events owns its socket;
    `close` (or the ``with`` block's end) closes it. Thread safety: one thread at a time."""

    def __init__(self, context: zmq.Context, endpoint: str, session: str,
                 kinds: Optional[Iterable[str]] = None, *, timeout: Optional[float] = 30.0,
                 curve: Optional[Dict[str, str]] = None, max_msg: int = 16 << 20,
                 rcvhwm: Optional[int] = None,
                 last_seq: Optional[Mapping[str, int]] = None):
        """See `Client.events`; `curve` holds the Z85 ``server``, ``public`` and ``secret``
        keys, `rcvhwm` the SUB socket's receive high-water mark (ZeroMQ's default: 1000)."""
        if not isinstance(session, str) or not session:
            raise RillError("EINVAL", "events: session must be a non-empty str")
        self.session = session
        self.kinds = None if kinds is None else tuple(kinds)
        if self.kinds is not None and (not self.kinds or not all(
                isinstance(k, str) and k and "/" not in k for k in self.kinds)):
            raise RillError("EINVAL", "events: kinds must be non-empty strs without '/'")
        self.timeout = timeout
        self.parser = EventParser(last_seq)
        self._pending: List[Item] = []
        self._closed = False
        sock = context.socket(zmq.SUB)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, max_msg)
            if rcvhwm is not None:
                sock.setsockopt(zmq.RCVHWM, rcvhwm)
            if curve is not None:
                sock.curve_serverkey = curve["server"].encode()
                sock.curve_publickey = curve["public"].encode()
                sock.curve_secretkey = curve["secret"].encode()
            sock.connect(endpoint)
            for t in self.topics:
                sock.setsockopt(zmq.SUBSCRIBE, t.encode("utf-8"))
        except zmq.ZMQError as e:
            sock.close(0)
            raise RillError("EINVAL", f"events: {endpoint}: {e}") from None
        self._sock = sock

    @property
    def topics(self) -> List[str]:
        """The topics (prefixes) subscribed to."""
        if self.kinds is None:
            return [self.session + "/"]
        return [f"{self.session}/{k}" for k in self.kinds]

    @property
    def last_seq(self) -> Dict[str, int]:
        """A copy of topic -> the last seq received: give it to a later iterator
        (`Client.events` ``last_seq=``) to see what was lost in between as a `Gap`."""
        return dict(self.parser.last_seq)

    @property
    def bad_events(self) -> int:
        """Messages skipped as malformed."""
        return self.parser.bad_events

    def poll(self, timeout: Optional[float] = 0.0) -> Optional[Item]:
        """The next event or `Gap`, waiting at most `timeout` seconds (None: for ever); None
        when nothing came in time. Raises `RillError` (RILL_ECLOSED) after `close`."""
        if self._closed:
            raise RillError("ECLOSED", "events: closed")
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._sock.poll(None if left is None else int(left * 1000)):
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                continue
            self._pending.extend(self.parser.feed(self._sock.recv_multipart()))
        return self._pending.pop(0)

    def __iter__(self) -> Iterator[Item]:
        return self

    def __next__(self) -> Item:
        if self._closed:
            raise StopIteration
        item = self.poll(self.timeout)
        if item is None:
            raise RillTimeout("ETIMEDOUT", f"no event on {', '.join(self.topics)} within "
                                           f"{self.timeout} s")
        return item

    def close(self) -> None:
        """Closes the socket (events not yet read are lost). Idempotent."""
        if not self._closed:
            self._closed = True
            self._sock.close(0)

    def __enter__(self) -> "Events":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
