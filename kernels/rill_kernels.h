/*
 * rill_kernels.h - the kernels module: element types (rill_dtype.h), quantization formats
 * (rill_quant.h) and the compute backends (rill_backend.h). Include this, or the part's own
 * header; each part's header is its manual.
 */
#ifndef RILL_KERNELS_H
#define RILL_KERNELS_H

#include "rill_backend.h"
#include "rill_dtype.h"
#include "rill_quant.h"

#endif /* RILL_KERNELS_H */
