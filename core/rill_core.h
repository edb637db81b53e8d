/*
 * rill_core.h - the core module: errors, counted allocation, logging and clock, latency
 * histogram, SPSC ring, thread pool, arena, seeded random numbers. Include this, or the part's
 * own header. Each part's header is its manual.
 */
#ifndef RILL_CORE_H
#define RILL_CORE_H

#include "rill_alloc.h"
#include "rill_arena.h"
#include "rill_err.h"
#include "rill_hist.h"
#include "rill_log.h"
#include "rill_pool.h"
#include "rill_rand.h"
#include "rill_ring.h"

#endif /* RILL_CORE_H */
