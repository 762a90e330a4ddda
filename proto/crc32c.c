/* SPDX-License-Identifier: MIT */
/*
 * CRC32C for every byte that enters or leaves ckptd.
 *
 * Shards are hundreds of GB, so the checksum must keep up with memory
 * bandwidth.  On x86-64 with SSE4.2 the crc32q instruction does 8 bytes per
 * instruction but has a latency of 3 cycles and a throughput of 1, so a
 * single dependency chain runs at a third of the possible speed.  Following
 * Mark Adler's well-known scheme we run three independent chains over three
 * adjacent blocks and then merge them: the CRC register of the first block
 * is advanced over the length of the next block by multiplying it by
 * x^(8*len) mod P, done with four 256-entry tables ("zeros operator") per
 * block length, and XORed with the next block's register.
 *
 * Without SSE4.2 (or off x86-64) a slicing-by-8 table gives the same
 * results.  All tables are built once, on first use, under pthread_once, so
 * the library needs no constructor and stays usable from any thread.
 *
 * crc32c_combine() uses zlib's method: polynomial multiplication modulo P in
 * the reflected domain and a 64-entry table of x^(8*2^k) mod P.
 *
 * crc32c_copy() is the trainer's one blocking copy, so it must cost about
 * what memcpy costs: small copies go piece by piece (memcpy, then CRC of the
 * piece while it is in L1/L2); large ones use streaming stores with the CRC
 * of the previous piece interleaved into the copy loop (see below).
 */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "crc32c.h"
#include "crc32c-internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CRC32C_HAVE_SSE42 1
#include <immintrin.h>
#else
#define CRC32C_HAVE_SSE42 0
#endif

/* Reflected Castagnoli polynomial. */
#define POLY 0x82f63b78u

/* Block lengths of the three-stream loop.  LONG amortises the two merges
 * over 24 KiB; SHORT catches what is left so that only < 768 bytes run on a
 * single chain. */
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
static bool have_sse42, have_avx2;
static uint32_t slice_table[8][256];
/* x2n_table[k] = x^(8 * 2^k) mod P: shifting by 2^k bytes. */
static uint32_t x2n_table[64];
static uint32_t long_shift[4][256];
static uint32_t short_shift[4][256];

/* a * b mod P, both in the reflected representation (bit 31 is x^0). */
static uint32_t multmodp(uint32_t a, uint32_t b) {
        uint32_t product = 0;

        for (uint32_t m = 1u << 31; m; m >>= 1) {
                if (a & m)
                        product ^= b;
                b = (b >> 1) ^ (POLY & -(b & 1));
        }
        return product;
}

/* x^(8 * n) mod P: the operator that advances a CRC register over n zero
 * bytes. */
static uint32_t x8nmodp(uint64_t n) {
        uint32_t p = 1u << 31; /* x^0 */
        bool identity = true;

        for (unsigned k = 0; n; n >>= 1, k++) {
                if (!(n & 1))
                        continue;
                p = identity ? x2n_table[k] : multmodp(x2n_table[k], p);
                identity = false;
        }
        return p;
}

static void shift_table_init(uint32_t table[4][256], uint64_t len) {
        uint32_t op = x8nmodp(len);

        for (uint32_t n = 0; n < 256; n++)
                for (unsigned k = 0; k < 4; k++)
                        table[k][n] = multmodp(op, n << (8 * k));
}

static void tables_init(void) {
        for (uint32_t n = 0; n < 256; n++) {
                uint32_t c = n;
                for (int i = 0; i < 8; i++)
                        c = (c >> 1) ^ (POLY & -(c & 1));
                slice_table[0][n] = c;
        }
        for (uint32_t n = 0; n < 256; n++)
                for (int k = 1; k < 8; k++) {
                        uint32_t c = slice_table[k - 1][n];
                        slice_table[k][n] = (c >> 8) ^ slice_table[0][c & 0xff];
                }

        x2n_table[0] = 1u << (31 - 8); /* x^8 */
        for (int k = 1; k < 64; k++)
                x2n_table[k] = multmodp(x2n_table[k - 1], x2n_table[k - 1]);

#if CRC32C_HAVE_SSE42
        __builtin_cpu_init();
        have_sse42 = __builtin_cpu_supports("sse4.2");
        have_avx2 = __builtin_cpu_supports("avx2");
#endif
        shift_table_init(long_shift, LONG_BLOCK);
        shift_table_init(short_shift, SHORT_BLOCK);
}

static inline void tables_ensure(void) {
        (void)pthread_once(&tables_once, tables_init);
}

static inline uint32_t load_le32(const unsigned char *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
               (uint32_t)p[3] << 24;
}

uint32_t crc32c_slice8(uint32_t crc, const void *buf, size_t len) {
        const unsigned char *p = buf;

        tables_ensure();
        crc = ~crc;
        while (len > 0 && ((uintptr_t)p & 7)) {
                crc = (crc >> 8) ^ slice_table[0][(crc ^ *p++) & 0xff];
                len--;
        }
        while (len >= 8) {
                uint32_t lo = crc ^ load_le32(p), hi = load_le32(p + 4);
                crc = slice_table[7][lo & 0xff] ^ slice_table[6][(lo >> 8) & 0xff] ^
                      slice_table[5][(lo >> 16) & 0xff] ^ slice_table[4][lo >> 24] ^
                      slice_table[3][hi & 0xff] ^ slice_table[2][(hi >> 8) & 0xff] ^
                      slice_table[1][(hi >> 16) & 0xff] ^ slice_table[0][hi >> 24];
                p += 8;
                len -= 8;
        }
        while (len > 0) {
                crc = (crc >> 8) ^ slice_table[0][(crc ^ *p++) & 0xff];
                len--;
        }
        return ~crc;
}

#if CRC32C_HAVE_SSE42

static inline uint64_t load64(const unsigned char *p) {
        uint64_t v;
        memcpy(&v, p, sizeof(v)); /* a plain mov; keeps UBSan and aliasing happy */
        return v;
}

/* Advance a raw CRC register over one block of zeros: multiply by the
 * block's x^(8*len) mod P, four bytes of the register at a time. */
static inline uint64_t shift_by(const uint32_t table[4][256], uint64_t crc) {
        return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^
               table[2][(crc >> 16) & 0xff] ^ table[3][(crc >> 24) & 0xff];
}

#define CRC32C_3WAY(block, table)                                                \
        while (len >= 3 * (block)) {                                             \
                uint64_t crc1 = 0, crc2 = 0;                                     \
                const unsigned char *end = p + (block);                          \
                do {                                                             \
                        crc0 = _mm_crc32_u64(crc0, load64(p));                   \
                        crc1 = _mm_crc32_u64(crc1, load64(p + (block)));         \
                        crc2 = _mm_crc32_u64(crc2, load64(p + 2 * (block)));     \
                        p += 8;                                                  \
                } while (p < end);                                               \
                crc0 = shift_by(table, crc0) ^ crc1;                             \
                crc0 = shift_by(table, crc0) ^ crc2;                             \
                p += 2 * (block);                                                \
                len -= 3 * (block);                                              \
        }

__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const void *buf,
                                                        size_t len) {
        const unsigned char *p = buf;
        uint64_t crc0 = ~crc;

        tables_ensure();
        while (len > 0 && ((uintptr_t)p & 7)) {
                crc0 = _mm_crc32_u8((uint32_t)crc0, *p++);
                len--;
        }
        CRC32C_3WAY(LONG_BLOCK, long_shift)
        CRC32C_3WAY(SHORT_BLOCK, short_shift)
        while (len >= 8) {
                crc0 = _mm_crc32_u64(crc0, load64(p));
                p += 8;
                len -= 8;
        }
        while (len > 0) {
                crc0 = _mm_crc32_u8((uint32_t)crc0, *p++);
                len--;
        }
        return ~(uint32_t)crc0;
}

/*
 * Large copies: memcpy would use non-temporal stores here (the destination
 * will not stay in cache anyway), and piecewise memcpy with ordinary stores
 * costs an extra read of every destination line.  So copy 24 KiB pieces with
 * AVX2 streaming stores and, in the same loop, run the three CRC chains over
 * the previous piece's source, which the copy has just pulled into L1/L2.
 * The CRC instructions then execute while the loads and stores wait on
 * memory, and copy+CRC runs close to memcpy speed.
 *
 * dst must be 32-byte aligned; copies npieces * COPY_NT_PIECE bytes and
 * returns crc continued over them.
 */
#define COPY_NT_PIECE (3 * LONG_BLOCK)

__attribute__((target("sse4.2,avx2"))) static inline void
copy_nt_96(unsigned char *dst, const unsigned char *src) {
        __m256i x0 = _mm256_loadu_si256((const __m256i *)src);
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(src + 32));
        __m256i x2 = _mm256_loadu_si256((const __m256i *)(src + 64));
        _mm256_stream_si256((__m256i *)dst, x0);
        _mm256_stream_si256((__m256i *)(dst + 32), x1);
        _mm256_stream_si256((__m256i *)(dst + 64), x2);
}

__attribute__((target("sse4.2,avx2"))) static uint32_t
copy_nt_pipelined(uint32_t crc, unsigned char *dst, const unsigned char *src, size_t npieces) {
        uint64_t crc0 = ~crc;

        if (npieces == 0)
                return crc;
        /* Each step copies 96 bytes of piece k and checksums 3 x 32 bytes
         * (one slice of each chain) of piece k-1: equal amounts, so the two
         * finish together. */
        for (size_t j = 0; j < LONG_BLOCK; j += 32)
                copy_nt_96(dst + 3 * j, src + 3 * j);
        for (size_t k = 1; k < npieces; k++) {
                const unsigned char *p = src + (k - 1) * COPY_NT_PIECE;
                const unsigned char *s = src + k * COPY_NT_PIECE;
                unsigned char *d = dst + k * COPY_NT_PIECE;
                uint64_t crc1 = 0, crc2 = 0;
                for (size_t j = 0; j < LONG_BLOCK; j += 32) {
                        copy_nt_96(d + 3 * j, s + 3 * j);
                        for (size_t q = j; q < j + 32; q += 8) {
                                crc0 = _mm_crc32_u64(crc0, load64(p + q));
                                crc1 = _mm_crc32_u64(crc1, load64(p + LONG_BLOCK + q));
                                crc2 = _mm_crc32_u64(crc2, load64(p + 2 * LONG_BLOCK + q));
                        }
                }
                crc0 = shift_by(long_shift, crc0) ^ crc1;
                crc0 = shift_by(long_shift, crc0) ^ crc2;
        }
        /* Streaming stores are weakly ordered: make them visible before the
         * caller tells anyone the bytes are there. */
        _mm_sfence();
        return crc32c_sse42(~(uint32_t)crc0, src + (npieces - 1) * COPY_NT_PIECE, COPY_NT_PIECE);
}

#else

uint32_t crc32c_sse42(uint32_t crc, const void *buf, size_t len) {
        return crc32c_slice8(crc, buf, len);
}

#endif

bool crc32c_sse42_available(void) {
        tables_ensure();
        return have_sse42;
}

bool crc32c_copy_nt_available(void) {
        tables_ensure();
        return CRC32C_HAVE_SSE42 && have_sse42 && have_avx2;
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len) {
        tables_ensure();
        if (have_sse42)
                return crc32c_sse42(crc, buf, len);
        return crc32c_slice8(crc, buf, len);
}

uint32_t crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
        tables_ensure();
        return multmodp(x8nmodp(len2), crc1) ^ crc2;
}

/* Copy in pieces small enough that the CRC pass over the source finds it
 * still in L1/L2. */
static uint32_t copy_pieces(uint32_t crc, unsigned char *d, const unsigned char *s, size_t len) {
        while (len > 0) {
                size_t n = len < CRC32C_COPY_PIECE ? len : CRC32C_COPY_PIECE;
                memcpy(d, s, n);
                crc = crc32c(crc, s, n);
                d += n;
                s += n;
                len -= n;
        }
        return crc;
}

/*
 * The CRC is of the source as read, as the header promises.  The daemon
 * checksums the destination (the slot) again on its side and compares; so a
 * source that changes during the copy — a trainer still writing its buffer —
 * shows up as a mismatch instead of torn bytes with a matching checksum.
 */
uint32_t crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len) {
        unsigned char *d = dst;
        const unsigned char *s = src;

        tables_ensure();
#if CRC32C_HAVE_SSE42
        if (have_sse42 && have_avx2 && len >= CRC32C_COPY_NT_MIN) {
                size_t head = (size_t)(-(uintptr_t)d & 31);
                crc = copy_pieces(crc, d, s, head);
                d += head;
                s += head;
                len -= head;
                size_t npieces = len / COPY_NT_PIECE;
                crc = copy_nt_pipelined(crc, d, s, npieces);
                d += npieces * COPY_NT_PIECE;
                s += npieces * COPY_NT_PIECE;
                len -= npieces * COPY_NT_PIECE;
        }
#endif
        return copy_pieces(crc, d, s, len);
}

const char *crc32c_impl(void) {
        tables_ensure();
        return have_sse42 ? "sse4.2" : "table";
}
