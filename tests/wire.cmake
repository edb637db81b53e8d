# Tests of the wire module: the msgpack structure check, the request decoder, the tick record's
# rules and encoding, CURVE key files. No model, no sockets.
rill_test(test_wire SOURCES test_wire.c LIBS rill_wire PkgConfig::MSGPACK LABELS unit TIMEOUT 120)
