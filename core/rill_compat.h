/*
 * rill_compat.h - the few C11 spellings rill's public headers use, written so that the headers
 * also compile as C++ (11 or later): a C++ program can include any rill header and call the
 * library (every public header is checked as both languages by tests/test_headers).
 *
 *   RILL_NORETURN        _Noreturn / [[noreturn]]
 *   RILL_ALIGNAS(n)      _Alignas(n) / alignas(n)
 *   RILL_ATOMIC(T)       _Atomic T / std::atomic<T>; the same size and representation for the
 *                        lock-free integer types rill uses (C++'s atomics are made to be
 *                        layout-compatible with C's), so a struct or pointer crosses between the
 *                        two languages
 *
 * Thread safety: definitions only.
 */
#ifndef RILL_COMPAT_H
#define RILL_COMPAT_H

#ifdef __cplusplus
#include <atomic>
#define RILL_NORETURN   [[noreturn]]
#define RILL_ALIGNAS(n) alignas(n)
#define RILL_ATOMIC(T)  std::atomic<T>
#else
#include <stdatomic.h>
#define RILL_NORETURN   _Noreturn
#define RILL_ALIGNAS(n) _Alignas(n)
#define RILL_ATOMIC(T)  _Atomic T
#endif

#endif /* RILL_COMPAT_H */
