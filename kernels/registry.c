/*
 * registry.c - the backend registry: the table of rows every backend is created from, the
 * checks all rows share, and the enumeration calls.
 *
 * Why a table instead of a switch on the kind: a backend joins by adding its row here (and its
 * file to CMakeLists.txt); rill_backend_new(), the listings of `rill` and the tests' backend-ops
 * run then see it without further edits. A row states its name, kind, numerics class,
 * available() (how many devices this machine has for it now) and create() (its new()). The
 * reserved CUDA kind has no row until kernels/cuda/ brings one, so asking for it is an honest
 * RILL_EUNSUPPORTED, not a placeholder that pretends. Row 0 is the reference backend: the
 * oracle the other rows are tested against.
 *
 * Creation errors record their sentence like every other error (rill_last_error: there is no
 * backend yet to carry it); the CPU row says the same way why a SIMD level is missing.
 */
#include <string.h>

#include "backend_internal.h"
#include "rill_log.h"

static const rill__backend_entry_t *const rows[] = {
    &rill__backend_entry_ref, &rill__backend_entry_cpu,
    /* kernels/cuda/ adds &rill__backend_entry_cuda here (RILL_HAVE_CUDA builds) */
};

enum { N_ROWS = (int)(sizeof rows / sizeof rows[0]) };

rill_backend_params_t rill_backend_default_params(void) {
    rill_backend_params_t p = { 0 };
    p.kind = RILL_BACKEND_CPU;
    p.device = 0;
    p.max_batch = 512;
    p.max_n_in = 8192;
    p.attn = RILL_ATTN_EXACT;
    p.cpu.n_threads = 0;
    p.cpu.simd = RILL_SIMD_AUTO;
    return p;
}

int32_t rill_backend_registry_count(void) {
    return N_ROWS;
}

rill_err_t rill_backend_registry_info(int32_t index, rill_backend_info_t *out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    if (index < 0 || index >= N_ROWS) {
        return RILL_ERANGE;
    }
    const rill__backend_entry_t *e = rows[index];
    *out = (rill_backend_info_t){ .name = e->name,
                                  .kind = e->kind,
                                  .numerics = e->numerics,
                                  .n_devices = e->available(),
                                  .summary = e->summary };
    return RILL_OK;
}

rill_err_t rill_backend_registry_find(const char *name, int32_t *index) {
    if (name == NULL || index == NULL) {
        return RILL_EINVAL;
    }
    for (int32_t i = 0; i < N_ROWS; i++) {
        if (strcmp(rows[i]->name, name) == 0) {
            *index = i;
            return RILL_OK;
        }
    }
    return RILL_ENOTFOUND;
}

static const char *kind_name(rill_backend_kind_t kind) {
    switch (kind) {
    case RILL_BACKEND_REF:
        return "ref";
    case RILL_BACKEND_CPU:
        return "cpu";
    case RILL_BACKEND_CUDA:
        return "cuda";
    }
    return "?";
}

rill_err_t rill_backend_new(const rill_backend_params_t *params, rill_backend_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    const rill_backend_params_t p = params != NULL ? *params : rill_backend_default_params();
    if (p.kind != RILL_BACKEND_REF && p.kind != RILL_BACKEND_CPU && p.kind != RILL_BACKEND_CUDA) {
        return rill__error(RILL_EINVAL, "backend: kind %d is not a rill_backend_kind_t",
                           (int)p.kind);
    }
    if (p.max_batch < 1 || p.max_n_in < 1 ||
        (double)p.max_batch * (double)p.max_n_in * 4.0 > 0x1p40) {
        return rill__error(
            RILL_EINVAL,
            "backend: max_batch %d / max_n_in %lld out of range (>= 1, product * 4 <= 2^40)",
            p.max_batch, (long long)p.max_n_in);
    }
    if (p.attn != RILL_ATTN_EXACT && p.attn != RILL_ATTN_FLASH) {
        return rill__error(RILL_EINVAL, "backend: attn %d is not a rill_attn_t", (int)p.attn);
    }
    if (p.device < 0) {
        return rill__error(RILL_EINVAL, "backend: device index %d is negative", p.device);
    }
    const rill__backend_entry_t *e = NULL;
    for (int i = 0; i < N_ROWS && e == NULL; i++) {
        e = rows[i]->kind == p.kind ? rows[i] : NULL;
    }
    if (e == NULL) {
        return rill__error(RILL_EUNSUPPORTED, "backend: no '%s' backend in this build",
                           kind_name(p.kind));
    }
    const int32_t n_devices = e->available();
    if (p.device >= n_devices) {
        return rill__error(RILL_ENOTFOUND,
                           "backend %s: device %d does not exist (%d device%s here)", e->name,
                           p.device, n_devices, n_devices == 1 ? "" : "s");
    }
    rill_err_t err = e->create(&p, out);
    if (err == RILL_OK) {
        (*out)->entry = e;
    }
    return err;
}
