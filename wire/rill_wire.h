/*
 * rill_wire.h - the wire module: what rilld (server/) and its clients (clients/) share about the
 * bytes between them (../shared/DESIGN.md section 2; the protocol is docs/protocol.md). Uses core
 * and msgpack-c (libzmq only inside, for Z85). Include this, or the part's own header; each
 * part's header is its manual.
 *
 *   rill_msgpack.h  the structure check of untrusted msgpack (before msgpack-c sees it), and
 *                   the str packer that sends only valid UTF-8
 *   rill_utf8.h     UTF-8 validation, the \xNN escape, cutting at a character boundary
 *   rill_proto.h    the protocol's requests: command table and the request decoder
 *   rill_tick.h     a trade tick, its validity rules and its msgpack encoding
 *   rill_curve.h    CURVE key files
 */
#ifndef RILL_WIRE_H
#define RILL_WIRE_H

#include "rill_curve.h"
#include "rill_msgpack.h"
#include "rill_proto.h"
#include "rill_tick.h"
#include "rill_utf8.h"

#endif /* RILL_WIRE_H */
