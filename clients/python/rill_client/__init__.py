"""rill_client - the Python client of rilld (rill's daemon), over its ZeroMQ wire protocol
(docs/protocol.md in the rill repository).

    import rill_client

    with rill_client.Client("tcp://127.0.0.1:7781", "tcp://127.0.0.1:7782") as c:
        c.session_create("notes")
        with c.events("notes", ["token", "answer"]) as ev:
            c.ingest_text("notes", "Bob is 42 years old.\\n", flush=True)
            a = c.ask("notes", "How old is Bob?")
            print(a.answer, a.ttft_ms)
            for item in ev:          # TokenEvent, ..., AnswerEvent; Gap where events were lost
                if isinstance(item, rill_client.AnswerEvent):
                    break

`Client` (rill_client.client): one method per command, errors as `RillError` subclasses
(rill_client.errors). `Client.events` returns an `Events` iterator (rill_client.events) with
gap detection. CURVE keys are read from `rill keygen` files (rill_client.keys).
Dependencies: pyzmq and msgpack.
"""

from .client import (DEFAULT_EVENTS, DEFAULT_REQUESTS, PROTOCOL_VERSION, Answer, Client,
                     Completion, StandingQuery, Tick)
from .errors import (ExistsError, FormatError, FullError, InvalidArgumentError,
                     NotFoundError, NotPermittedError, RangeError, RillError, RillTimeout,
                     UnsupportedError, error_for)
from .events import (KINDS, AnswerEvent, Event, EventParser, Events, Gap, StandingEvent,
                     TokenEvent, TranscriptEvent)
from .keys import load_key, parse_key, read_key

__version__ = "1.0.0"

__all__ = [
    "Client", "Answer", "StandingQuery", "Completion", "Tick", "DEFAULT_REQUESTS", "DEFAULT_EVENTS",
    "PROTOCOL_VERSION",
    "RillError", "InvalidArgumentError", "NotFoundError", "ExistsError", "NotPermittedError",
    "FullError", "RangeError", "FormatError", "UnsupportedError", "RillTimeout", "error_for",
    "Events", "EventParser", "Event", "TokenEvent", "AnswerEvent", "StandingEvent",
    "TranscriptEvent", "Gap", "KINDS",
    "parse_key", "read_key", "load_key",
]
