"""Errors of rill_client: one exception class per rill status (core/rill_err.h).

Every failure of a call raises a `RillError` (or a subclass). Its attributes:

- ``status``: the status as the ``rill_err_t`` name, e.g. ``"RILL_ENOTFOUND"`` (the name
  rilld's HTTP errors carry as ``code``);
- ``wire``: the same status as it travels in a ZeroMQ reply, without the prefix
  (``"ENOTFOUND"``);
- ``message``: rilld's human-readable detail (``"no such session 'x'"``), or this client's
  own when the error was found on this side (a timeout, a malformed reply);
- ``cmd``: the command the error answers (``"session.stats"``), or None.

The subclasses let callers catch what they handle (``except rill_client.NotFoundError``);
a status without a class of its own (``EIO``, ``EINTERNAL``, ...) raises `RillError` itself,
and a status name this client does not know raises `RillError` with that name.
`RillTimeout` is also a `TimeoutError`, so generic timeout handling catches it.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "RillError",
    "InvalidArgumentError",
    "NotFoundError",
    "ExistsError",
    "NotPermittedError",
    "FullError",
    "RangeError",
    "FormatError",
    "UnsupportedError",
    "RillTimeout",
    "error_for",
]


class RillError(Exception):
    """A failed call: ``status`` ("RILL_E..."), ``wire`` ("E..."), ``message``, ``cmd``."""

    def __init__(self, status: str, message: str = "", cmd: Optional[str] = None):
        wire = status[5:] if status.startswith("RILL_") else status
        self.wire: str = wire
        self.status: str = "RILL_" + wire
        self.message: str = message
        self.cmd: Optional[str] = cmd
        where = f"{cmd}: " if cmd else ""
        super().__init__(f"{where}{self.status}: {message}" if message else
                         f"{where}{self.status}")


class InvalidArgumentError(RillError):
    """RILL_EINVAL: an argument rilld refused (unknown key, bad session name, empty question,
    a version that is not the session's, ...)."""


class NotFoundError(RillError):
    """RILL_ENOTFOUND: no such session or standing query."""


class ExistsError(RillError):
    """RILL_EEXIST: the session name is taken (also, under CURVE, by another key's closed
    session: docs/protocol.md, Security)."""


class NotPermittedError(RillError):
    """RILL_EPERM: under CURVE, a session that belongs to another key ("not your session")."""


class FullError(RillError):
    """RILL_EFULL: back-pressure (the session has too much queued, or the engine is out of
    pages): retry later."""


class RangeError(RillError):
    """RILL_ERANGE: a number out of its range (``max_tokens``, ``window``, too many ticks, a
    replace that reaches back too far), or a request larger than ``max_request``."""


class FormatError(RillError):
    """RILL_EFORMAT: a field of the wrong type (rilld), or a reply, event or key file this
    client could not read (then ``message`` says what was wrong)."""


class UnsupportedError(RillError):
    """RILL_EUNSUPPORTED: the other side speaks another protocol version."""


class RillTimeout(RillError, TimeoutError):
    """RILL_ETIMEDOUT: no connection, or no reply (or event), within the timeout. Under CURVE
    a key rilld does not list gets no reply at all, so it sees this too."""


_BY_WIRE: Dict[str, Type[RillError]] = {
    "EINVAL": InvalidArgumentError,
    "ENOTFOUND": NotFoundError,
    "EEXIST": ExistsError,
    "EPERM": NotPermittedError,
    "EFULL": FullError,
    "ERANGE": RangeError,
    "EFORMAT": FormatError,
    "EUNSUPPORTED": UnsupportedError,
    "ETIMEDOUT": RillTimeout,
}


def error_for(status: str, message: str = "", cmd: Optional[str] = None) -> RillError:
    """The exception for a status name, with or without the ``RILL_`` prefix
    (``error_for("ENOTFOUND", "no such session")`` is a `NotFoundError`). Returns it; does not
    raise."""
    wire = status[5:] if status.startswith("RILL_") else status
    return _BY_WIRE.get(wire, RillError)(wire, message, cmd)
