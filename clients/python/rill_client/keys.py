"""CURVE keys: the key files `rill keygen PREFIX` writes (PREFIX.pub, PREFIX.key) and rilld's
``--curve-keys DIR`` reads (docs/protocol.md, Security; the C reader is wire/rill_curve.h).

A key file holds one key in Z85 (ZeroMQ's RFC 32 encoding: 40 characters for 32 bytes) with
optional whitespace (space, tab, line ends, vertical tab, form feed) around it and nothing else;
a file longer than 4096 bytes is not a key file. This module reads them by the same rule, so a
file rilld refuses is refused here too.
"""

from __future__ import annotations

import os
from typing import Union

from zmq.utils import z85

from .errors import FormatError, RillError

__all__ = ["KEY_Z85", "KEY_FILE_MAX", "parse_key", "read_key", "load_key"]

KEY_Z85 = 40  #: characters of a key in Z85
KEY_FILE_MAX = 4096  #: a key file longer than this (bytes) is refused

_BLANK = b" \t\n\r\v\f"
_Z85_ALPHABET = frozenset(
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")


def parse_key(text: Union[str, bytes], what: str = "key") -> str:
    """Parses `text` as one Z85 key with optional whitespace around it and returns the key's
    40 characters. `what` names the text in the error (a path, "server key"). Raises
    `FormatError` (status RILL_EFORMAT) for anything else: no key, a key of another length, a
    character outside Z85, a group whose value exceeds 32 bits, two words."""
    raw = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
    word = raw.strip(_BLANK)
    if not word:
        raise FormatError("EFORMAT", f"{what}: no key")
    if any(c in _BLANK for c in word):
        raise FormatError("EFORMAT", f"{what}: more than one word")
    if len(word) != KEY_Z85:
        raise FormatError("EFORMAT", f"{what}: a Z85 key is {KEY_Z85} characters, not "
                                     f"{len(word)}")
    if not all(c in _Z85_ALPHABET for c in word):
        raise FormatError("EFORMAT", f"{what}: a character outside Z85")
    try:
        z85.decode(word)
    except Exception as e:  # struct.error: a group above 2^32 - 1
        raise FormatError("EFORMAT", f"{what}: not a Z85 key ({e})") from None
    return word.decode("ascii")


def read_key(path: Union[str, "os.PathLike[str]"]) -> str:
    """Reads the key file at `path` (see the top of this module) and returns its key's 40 Z85
    characters. Raises `RillError` with status RILL_EIO when the file cannot be read (the
    system's reason in the message), `FormatError` when it is not one key or is longer than
    `KEY_FILE_MAX` bytes. Blocks on the read."""
    try:
        with open(path, "rb") as f:
            data = f.read(KEY_FILE_MAX + 1)
    except OSError as e:
        raise RillError("EIO", f"{os.fspath(path)}: {e.strerror or e}") from None
    if len(data) > KEY_FILE_MAX:
        raise FormatError("EFORMAT", f"{os.fspath(path)}: longer than {KEY_FILE_MAX} bytes")
    return parse_key(data, os.fspath(path))


def load_key(key: Union[str, bytes, "os.PathLike[str]"], what: str = "key") -> str:
    """A key given either way the client takes one: its 40 Z85 characters (str or bytes), or
    the path of a key file (anything else: a str that is not a 40-character key, or a
    PathLike). Returns the Z85 text; raises as `parse_key` and `read_key` do."""
    if isinstance(key, bytes):
        return parse_key(key, what)
    if isinstance(key, str) and len(key.strip()) == KEY_Z85 and not os.path.exists(key):
        return parse_key(key, what)
    return read_key(key)
