/*
 * durable_io.c - what the ingest log (log.c) and snapshots (snapshot.c) share: CRC-32C, the
 * little-endian field codec, the model fingerprint, and the file calls that must not fail
 * silently (write, fsync, ftruncate, rename), with a test hook that fails the N-th of them.
 *
 * Design. Every durable byte goes through the io_* helpers here, so one counter sees every
 * call that can lose data and a test can walk "the N-th I/O call fails" as it walks the N-th
 * allocation (STYLE.md rule 26, SQLite's technique). Reads are not injected: a failed read is
 * indistinguishable from the short or corrupt files that the tests build on purpose.
 *
 * CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, the checksum of iSCSI, ext4 and
 * LevelDB): table-driven, eight bytes per step ("slicing-by-8"), about 1-2 GB/s, which keeps
 * checksumming a 100 MB snapshot well under the time it takes to read it. The 8 KiB table is
 * built once (pthread_once) because any thread may own a pool.
 *
 * Rejected: zlib's crc32 (a dependency for twenty lines), the SSE4.2 crc32 instruction (needs
 * per-CPU dispatch; not the bottleneck), byte swapping for big-endian hosts (none is supported:
 * the KV pages in a snapshot are host-order F16/F32 anyway, so the build refuses them below).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "rill_log.h"
#include "session_internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "rill's session files are little-endian and written in host order: add byte swapping"
#endif

/* ---- CRC-32C ------------------------------------------------------------------------------ */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        }
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) {
            uint32_t c = crc_table[t - 1][i];
            crc_table[t][i] = (c >> 8) ^ crc_table[0][c & 0xff];
        }
    }
}

uint32_t rill__crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = data;
    crc = ~crc;
    for (; n > 0 && ((uintptr_t)p & 7) != 0; n--) {
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    }
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
              crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^
              crc_table[2][(hi >> 8) & 0xff] ^ crc_table[1][(hi >> 16) & 0xff] ^
              crc_table[0][hi >> 24];
    }
    for (; n > 0; n--) {
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    }
    return ~crc;
}

/* ---- little-endian fields ------------------------------------------------------------------ */

void rill__put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

void rill__put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

uint32_t rill__get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        v |= (uint32_t)p[i] << (8 * i);
    }
    return v;
}

uint64_t rill__get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v |= (uint64_t)p[i] << (8 * i);
    }
    return v;
}

/* ---- the model fingerprint ------------------------------------------------------------------
 * 14 u32 fields then the GGUF file size as u64: RILL__FP_BYTES bytes. */

static const char *const fp_names[RILL__FP_FIELDS] = {
    "architecture",     "n_vocab",        "n_embd",         "n_layer",     "n_ff",
    "n_head",           "n_head_kv",      "head_dim",       "n_ctx_train", "rope type",
    "rope base (bits)", "rms eps (bits)", "KV cache types", "page size",   "GGUF file size",
};

/* The fingerprint's KV field: K's ggml type id in the low byte and (V's id XOR K's) in the
 * next, so a pool whose K and V share a type writes that type's id alone, as files did before
 * K and V had separate types (those still load where the types match). */
#define FP_KV_FIELD 12

static uint64_t kv_types_code(rill_dtype_t k, rill_dtype_t v) {
    return (uint64_t)(uint32_t)k | ((uint64_t)((uint32_t)v ^ (uint32_t)k) & 0xffu) << 8;
}

static void kv_types_text(uint64_t code, char *buf, size_t len) {
    const rill_dtype_t k = (rill_dtype_t)(code & 0xffu);
    const rill_dtype_t v = (rill_dtype_t)((code & 0xffu) ^ ((code >> 8) & 0xffu));
    if (code > 0xffffu || !rill_dtype_valid((int)k) || !rill_dtype_valid((int)v)) {
        snprintf(buf, len, "unknown (%llu)", (unsigned long long)code);
    } else {
        snprintf(buf, len, "K %s, V %s", rill_dtype_name(k), rill_dtype_name(v));
    }
}

static void fp_values(const rill_session_pool_t *p, uint64_t v[RILL__FP_FIELDS]) {
    const rill_model_t *m = rill_forward_model(p->fw);
    const rill_hparams_t *hp = rill_model_hparams(m);
    uint32_t base, eps;
    memcpy(&base, &hp->rope_base, 4);
    memcpy(&eps, &hp->rms_eps, 4);
    uint64_t vals[RILL__FP_FIELDS] = {
        (uint64_t)hp->arch,
        (uint64_t)hp->n_vocab,
        (uint64_t)hp->n_embd,
        (uint64_t)hp->n_layer,
        (uint64_t)hp->n_ff,
        (uint64_t)hp->n_head,
        (uint64_t)hp->n_head_kv,
        (uint64_t)hp->head_dim,
        (uint64_t)hp->n_ctx_train,
        (uint64_t)hp->rope_type,
        base,
        eps,
        kv_types_code(p->layout.k_dtype, p->layout.v_dtype),
        (uint64_t)p->P,
        rill_gguf_file_size(rill_model_gguf(m)),
    };
    memcpy(v, vals, sizeof vals);
}

void rill__fingerprint_put(const rill_session_pool_t *p, unsigned char out[RILL__FP_BYTES]) {
    uint64_t v[RILL__FP_FIELDS];
    fp_values(p, v);
    for (int i = 0; i < RILL__FP_FIELDS - 1; i++) {
        rill__put_u32(out + 4 * i, (uint32_t)v[i]);
    }
    rill__put_u64(out + 4 * (RILL__FP_FIELDS - 1), v[RILL__FP_FIELDS - 1]);
}

bool rill__fingerprint_check(const rill_session_pool_t *p, const unsigned char *in, char *msg,
                             size_t msglen) {
    uint64_t v[RILL__FP_FIELDS];
    fp_values(p, v);
    for (int i = 0; i < RILL__FP_FIELDS; i++) {
        uint64_t got =
            i < RILL__FP_FIELDS - 1 ? rill__get_u32(in + 4 * i) : rill__get_u64(in + 4 * i);
        if (got != v[i] && i == FP_KV_FIELD) {
            char file_t[64], here_t[64];
            kv_types_text(got, file_t, sizeof file_t);
            kv_types_text(v[i], here_t, sizeof here_t);
            snprintf(msg, msglen,
                     "written with KV cache types %s; this pool has %s (a cache's contents are "
                     "only read back with the types that wrote them)",
                     file_t, here_t);
            return false;
        }
        if (got != v[i]) {
            snprintf(msg, msglen, "written for another model or pool: %s %llu, here %llu",
                     fp_names[i], (unsigned long long)got, (unsigned long long)v[i]);
            return false;
        }
    }
    return true;
}

/* ---- file calls with failure injection ------------------------------------------------------ */

static _Atomic int64_t io_calls;
static _Atomic int64_t io_fail_at; /* io_calls value that fails; 0: none */

void rill__session_io_fail_nth(int64_t n) {
    atomic_store(&io_fail_at, n > 0 ? atomic_load(&io_calls) + n : 0);
}

int64_t rill__session_io_calls(void) {
    return atomic_load(&io_calls);
}

/* Counts one call; true (errno = EIO) when it is the one to fail. */
static bool injected(void) {
    int64_t k = atomic_fetch_add(&io_calls, 1) + 1;
    int64_t at = atomic_load(&io_fail_at);
    if (at != 0 && k == at) {
        atomic_store(&io_fail_at, 0);
        errno = EIO;
        return true;
    }
    return false;
}

int rill__io_open(const char *path, int flags, int mode) {
    if (injected()) {
        return -1;
    }
    int fd;
    do {
        fd = open(path, flags | O_CLOEXEC, mode);
    } while (fd < 0 && errno == EINTR);
    return fd;
}

int rill__io_writev(int fd, const struct iovec *iov_in, int n_iov) {
    if (injected()) {
        return -1;
    }
    struct iovec iov[4];
    RILL_ASSERT(n_iov >= 1 && n_iov <= 4);
    memcpy(iov, iov_in, (size_t)n_iov * sizeof *iov);
    struct iovec *v = iov;
    while (n_iov > 0) {
        ssize_t w = writev(fd, v, n_iov);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        size_t left = (size_t)w;
        while (n_iov > 0 && left >= v->iov_len) {
            left -= v->iov_len;
            v++;
            n_iov--;
        }
        if (n_iov > 0) {
            v->iov_base = (char *)v->iov_base + left;
            v->iov_len -= left;
        }
    }
    return 0;
}

int rill__io_write(int fd, const void *buf, size_t n) {
    struct iovec v = { (void *)buf, n };
    return n == 0 ? 0 : rill__io_writev(fd, &v, 1);
}

int rill__io_fsync(int fd, bool data_only) {
    if (injected()) {
        return -1;
    }
    int rc;
    do {
        rc = data_only ? fdatasync(fd) : fsync(fd);
    } while (rc != 0 && errno == EINTR);
    return rc;
}

int rill__io_ftruncate(int fd, int64_t size) {
    if (injected()) {
        return -1;
    }
    int rc;
    do {
        rc = ftruncate(fd, (off_t)size);
    } while (rc != 0 && errno == EINTR);
    return rc;
}

int rill__io_rename(const char *from, const char *to) {
    if (injected()) {
        return -1;
    }
    return rename(from, to);
}

int rill__io_fsync_dir(const char *path) {
    if (injected()) {
        return -1;
    }
    /* The directory is everything before the last '/'. A path that open() accepted fits in
     * PATH_MAX, so a stack buffer of that size avoids an allocation (and its failure path). */
    char dir[4096];
    const char *slash = strrchr(path, '/');
    size_t len = slash == NULL ? 0 : slash == path ? 1 : (size_t)(slash - path);
    if (len >= sizeof dir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (slash == NULL) {
        dir[0] = '.';
        len = 1;
    } else {
        memcpy(dir, path, len);
    }
    dir[len] = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    int rc;
    do {
        rc = fsync(fd);
    } while (rc != 0 && errno == EINTR);
    /* Some file systems cannot fsync a directory (EINVAL): nothing more can be done there. */
    if (rc != 0 && errno == EINVAL) {
        rc = 0;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

rill_err_t rill__io_err(int e) {
    switch (e) {
    case ENOMEM:
        return RILL_ENOMEM;
    case ENOENT:
    case ENOTDIR:
        return RILL_ENOTFOUND;
    case EEXIST:
        return RILL_EEXIST;
    case EACCES:
    case EPERM:
    case EROFS:
        return RILL_EPERM;
    default:
        return RILL_EIO;
    }
}

int rill__io_pread(int fd, void *buf, size_t n, int64_t off) {
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        if (r == 0) {
            errno = 0; /* end of file */
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

int64_t rill__io_file_size(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        return -1;
    }
    return (int64_t)st.st_size;
}
