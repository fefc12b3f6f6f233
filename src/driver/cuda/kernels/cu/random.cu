// The random kernel `rnd`, after random_head.cu: the Philox4x32-10 stream mapping of
// src/kernel/random.rs (element i from block offset + i / E), each thread a block of E elements
// written once. All float math is explicit correctly rounded double operations (no contraction
// into FMA), so the values are the CPU kernel's bit for bit, except where log / sin / cos enter
// (libdevice's double functions: a few ulp of double; see TRANSCENDENTAL_ULP_F64); the normals
// of f32, f16 and bf16 are f32 math with their own log / sin / cos (bm_*), bit for bit.

struct RndP {
    u64 dst;
    u64 src;
    u64 slot;
    i64 n;
    u64 seed;
    u64 offset;
    double a;
    double b;
    i64 low;
    u64 range;
    i64 vec;
    /* The seed's round keys (philox_keys) when the seed comes with the launch (no slot): read
       from the parameter bank as operands, none recomputed per block. */
    u32 k0[10], k1[10];
};

struct __align__(sizeof(TS) * E) RndPack { TS v[E]; };

__device__ __forceinline__ double p2n(int k) { return __longlong_as_double((i64)(1023 - k) << 52); }
__device__ __forceinline__ u64 u53(u32 a, u32 b) { return ((u64)a << 21) | ((u64)b >> 11); }

/* Philox's round keys of a seed (the key before round r, r = 0..9), computed once for a
   thread's many blocks. */
struct PhiloxKeys {
    u32 k0[10], k1[10];
};

__device__ __forceinline__ PhiloxKeys philox_keys(u64 seed) {
    PhiloxKeys k;
    k.k0[0] = (u32)seed;
    k.k1[0] = (u32)(seed >> 32);
#pragma unroll
    for (int r = 1; r < 10; r++) {
        k.k0[r] = k.k0[r - 1] + 0x9E3779B9u;
        k.k1[r] = k.k1[r - 1] + 0xBB67AE85u;
    }
    return k;
}

/* philox() with the round keys given (k.k0, k.k1: a PhiloxKeys or the launch's RndP). */
template <typename K>
__device__ __forceinline__ void philox_with(const K& k, u64 block, u32 w[4]) {
    u32 c0 = (u32)block, c1 = (u32)(block >> 32), c2 = 0u, c3 = 0u;
#pragma unroll
    for (int r = 0; r < 10; r++) {
        const u32 hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const u32 hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        const u32 n0 = hi1 ^ c1 ^ k.k0[r], n2 = hi0 ^ c3 ^ k.k1[r];
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    w[0] = c0;
    w[1] = c1;
    w[2] = c2;
    w[3] = c3;
}

/* Philox4x32-10 of counter `block` under `seed` (its round keys computed here). */
__device__ __forceinline__ void philox(u64 seed, u64 block, u32 w[4]) { philox_with(philox_keys(seed), block, w); }

__device__ __forceinline__ void rnd_stream(const RndP& p, u64& seed, u64& base) {
    seed = p.seed;
    base = p.offset;
    if (p.slot) {
        const u64* s = (const u64*)p.slot;
        seed = s[0];
        base = s[1] + p.offset;
    }
}

#if DIST == 1 && E == 4
/* Box-Muller in f32 (src/kernel/box_muller.rs, operation for operation: each an explicitly
   rounded intrinsic, so nothing is contracted and the host's bits come out). */
#define BMF(h) __uint_as_float(h##u)
/* a / b correctly rounded for b in [1.7, 2.5] and |a| < 1: the fast path of the compiler's own
   div.rn.f32 (its reciprocal, one Newton step, the quotient and one correction), without the
   range check whose slow path these operands never take. */
__device__ __forceinline__ float bm_div(float a, float b) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
    const float e = __fmaf_rn(-b, r, 1.0f);
    const float r1 = __fmaf_rn(r, e, r);
    const float q = __fmaf_rn(a, r1, 0.0f);
    const float rem = __fmaf_rn(-b, q, a);
    return __fmaf_rn(r1, rem, q);
}
/* The square root of x in {0, -0} or [2^-24, 64] correctly rounded: the fast path of the
   compiler's own sqrt.rn.f32 (reciprocal square root, y = x r, one correction); a zero is its
   own root. */
__device__ __forceinline__ float bm_sqrt(float x) {
    float r;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    const float y = __fmul_rn(x, r), h = __fmul_rn(r, 0.5f);
    const float rem = __fmaf_rn(-y, y, x);
    const float root = __fmaf_rn(rem, h, y);
    return x == 0.0f ? x : root;
}
__device__ __forceinline__ float bm_ln(float x) {
    const u32 bits = __float_as_uint(x);
    int e = (int)(bits >> 23) - 127;
    const u32 mant = bits & 0x007fffffu;
    float m;
    if (mant > 0x003504f3u) {
        e += 1;
        m = __uint_as_float(mant | 0x3f000000u);
    } else {
        m = __uint_as_float(mant | 0x3f800000u);
    }
    const float f = __fsub_rn(m, 1.0f);
    const float s = bm_div(f, __fadd_rn(2.0f, f));
    const float z = __fmul_rn(s, s);
    const float q = __fmaf_rn(z, __fmaf_rn(z, __fmaf_rn(z, BMF(0x3e638e39), BMF(0x3e924925)), BMF(0x3ecccccd)),
                              BMF(0x3f2aaaab));
    const float hfsq = __fmul_rn(__fmul_rn(0.5f, f), f);
    const float g = __fmaf_rn(s, __fmaf_rn(z, q, hfsq), -hfsq);
    const float l = __fadd_rn(f, g);
    const float ef = __int2float_rn(e);
    return __fmaf_rn(ef, BMF(0x3f317218), __fmaf_rn(ef, BMF(0xb102e308), l));
}
/* (sin, cos) of 2 pi k / 2^24, k < 2^24. */
__device__ __forceinline__ void bm_sincos(u32 k, float& so, float& co) {
    const u32 q = (k + (1u << 21)) >> 22;
    const float r = __fmul_rn(__int2float_rn((int)k - (int)(q << 22)), BMF(0x34800000));
    const float w = __fmul_rn(r, r);
    const float ps = __fmaf_rn(
        w, __fmaf_rn(w, __fmaf_rn(w, __fmaf_rn(w, __fmaf_rn(w, BMF(0xb67183a8), BMF(0x39283c1a)), BMF(0xbb996966)),
                                      BMF(0x3da335e3)),
                     BMF(0xbf255de7)),
        BMF(0x3fc90fdb));
    const float s = __fmul_rn(r, ps);
    const float c = __fmaf_rn(
        w, __fmaf_rn(w, __fmaf_rn(w, __fmaf_rn(w, __fmaf_rn(w, BMF(0xb7d368f9), BMF(0x3a70fa83)), BMF(0xbcaae9e4)),
                                      BMF(0x3e81e0f8)),
                     BMF(0xbf9de9e6)),
        1.0f);
    /* Rotated by q quarter turns without a branch: (s, c), (c, -s), (-s, -c), (-c, s) (a
       negation flips the sign bit, as the host's). */
    const bool odd = q & 1u;
    const u32 sin_neg = (q & 2u) << 30, cos_neg = ((q + 1u) & 2u) << 30;
    so = __uint_as_float(__float_as_uint(odd ? c : s) ^ sin_neg);
    co = __uint_as_float(__float_as_uint(odd ? s : c) ^ cos_neg);
}
/* The pair (rho cos, rho sin) of two words. */
__device__ __forceinline__ void bm_pair(u32 w0, u32 w1, float& z0, float& z1) {
    const float u1 = __fmaf_rn(__uint2float_rn(w0), BMF(0x2f800000), BMF(0x2f000000));
    const float rho = bm_sqrt(__fmul_rn(-2.0f, bm_ln(u1)));
    float s, c;
    bm_sincos(w1 >> 8, s, c);
    z0 = __fmul_rn(rho, c);
    z1 = __fmul_rn(rho, s);
}
#endif

#if DIST < 6
/* The E elements of a block of words w, the first being element i0 (x: dropout's input
   elements there). */
__device__ __forceinline__ void values(const RndP& p, const u32 w[4], i64 i0, const RndPack& x, RndPack& out) {
#if DIST == 0 && E == 4
    /* rand's [0, 1): u itself (low + u (high - low) is u exactly, and u < 1 in every dtype). */
    if (p.a == 0.0 && p.b == 1.0) {
#pragma unroll
        for (int j = 0; j < E; j++) {
            out.v[j] = from_f(__fmul_rn(__uint2float_rn(w[j] >> (32 - BITS)), __uint_as_float((u32)(127 - BITS) << 23)));
        }
        return;
    }
#endif
#if DIST == 1 && E == 4
    const float mean = __double2float_rn(p.a), sd = __double2float_rn(p.b);
    float z[4];
    bm_pair(w[0], w[1], z[0], z[1]);
    bm_pair(w[2], w[3], z[2], z[3]);
#pragma unroll
    for (int j = 0; j < 4; j++) out.v[j] = from_f(__fmaf_rn(z[j], sd, mean));
#elif DIST == 4
    /* Dropout of the input's E elements x (loaded by the caller); f32 math below f64. */
    const float scale = __double2float_rn(p.b);
#pragma unroll
    for (int j = 0; j < E; j++) {
        const bool keep = (u64)w[j] < p.range; /* w 2^-32 < 1 - p (random.rs: below) */
        if constexpr (sizeof(TS) == 8) {
            out.v[j] = from_d(__dmul_rn(to_d(x.v[j]), keep ? p.b : 0.0));
        } else {
            out.v[j] = from_f(__fmul_rn(to_f(x.v[j]), keep ? scale : 0.0f));
        }
    }
#elif DIST == 1
    const double u1 = __dmul_rn((double)(u53(w[0], w[1]) + 1ull), p2n(53));
    const double u2 = __dmul_rn((double)u53(w[2], w[3]), p2n(53));
    const double r = __dsqrt_rn(__dmul_rn(-2.0, log(u1)));
    const double th = __dmul_rn(6.283185307179586, u2);
    out.v[0] = from_d(__dadd_rn(p.a, __dmul_rn(p.b, __dmul_rn(r, cos(th)))));
    out.v[1] = from_d(__dadd_rn(p.a, __dmul_rn(p.b, __dmul_rn(r, sin(th)))));
#else
#pragma unroll
    for (int j = 0; j < E; j++) {
#if DIST == 0
#if E == 2
        const double u = __dmul_rn((double)u53(w[2 * j], w[2 * j + 1]), p2n(53));
#else
        const double u = __dmul_rn((double)(w[j] >> (32 - BITS)), p2n(BITS));
#endif
        const TS v = from_d(__dadd_rn(p.a, __dmul_rn(u, __dsub_rn(p.b, p.a))));
        out.v[j] = to_d(v) >= p.b ? from_d(p.a) : v;
#elif DIST == 2
        const double u = __dmul_rn((double)(u53(w[2 * j], w[2 * j + 1]) + 1ull), p2n(53));
        out.v[j] = from_d(__ddiv_rn(__dsub_rn(0.0, log(u)), p.a));
#elif DIST == 3
        out.v[j] = from_d((u64)w[j] < p.range ? 1.0 : 0.0); /* w 2^-32 < p (random.rs: below) */
#else
#if E == 4
        const u64 r = (u64)w[j] % p.range;
#else
        const u64 r = (((u64)w[2 * j] << 32) | (u64)w[2 * j + 1]) % p.range;
#endif
        out.v[j] = from_i((i64)((u64)p.low + r));
#endif
    }
#endif
}

/* Philox blocks a thread makes per pass of its grid-stride loop, G apart by the grid's
   threads (their elements: whole blocks, each written once), its inputs loaded first. One: on
   the H100, dropout with four (64 registers, half the threads) ran no faster (1897 GB/s against
   1932); the host sizes the grid for a few passes instead (random.rs). */
#define G 1

/* Dropout's input elements of the block from i0: one load where aligned. */
__device__ __forceinline__ void input_of(const RndP& p, i64 i0, RndPack& x) {
#if DIST == 4
    const TS* src = (const TS*)p.src;
    if (p.vec && i0 + E <= p.n) {
        x = *(const RndPack*)(src + i0);
    } else {
#pragma unroll
        for (int j = 0; j < E; j++) x.v[j] = i0 + j < p.n ? src[i0 + j] : from_i(0);
    }
#endif
}

/* The grid-stride loop over the draw's blocks, from the round keys k (the launch's, or computed
   from a slot's seed). */
template <typename K>
__device__ __forceinline__ void rnd_blocks(const RndP& p, const K& keys, u64 base) {
    TS* dst = (TS*)p.dst;
    const i64 blocks = (p.n + E - 1) / E;
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 b0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; b0 < blocks; b0 += step * G) {
        RndPack x[G];
#pragma unroll
        for (int g = 0; g < G; g++) {
            if (b0 + g * step < blocks) input_of(p, (b0 + g * step) * E, x[g]);
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            const i64 b = b0 + g * step;
            if (b >= blocks) break;
            u32 w[4];
            philox_with(keys, base + (u64)b, w);
            const i64 i0 = b * E;
            RndPack out;
            values(p, w, i0, x[g], out);
            if (p.vec && i0 + E <= p.n) {
                *(RndPack*)(dst + i0) = out;
            } else {
#pragma unroll
                for (int j = 0; j < E; j++) {
                    if (i0 + j < p.n) dst[i0 + j] = out.v[j];
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) rnd(RndP p) {
    cs_enter();
    if (p.slot) {
        u64 seed, base;
        rnd_stream(p, seed, base);
        rnd_blocks(p, philox_keys(seed), base);
    } else {
        rnd_blocks(p, p, p.offset);
    }
}

#elif DIST == 6
/* Multinomial rows (kernel/random.rs: Distribution::Multinomial, whose summation order this is,
   bit for bit; the CPU kernel's multinomial_row). The weights (TS) are [rows, cats]; a row is
   split in tiles of MT categories, a block of 256 threads per (row, tile): thread t owns the
   tile's categories 1024 i + 4 t + q (i, q < 4). Each block sums its tile and checks its
   weights, writes them to the scratch partials and counts itself done on its row's counter;
   the row's last block (a row of one tile: its only block) adds the tiles' totals in order,
   writes the row's status word and makes the row's samples, each from one tile it reads again
   (L2-resident). It leaves the counter at zero for the next launch. */
#define MT 4096
#define MV 16
#define MTILES 4096

struct MulP {
    u64 dst;     /* picks of the launch's first row: int64 [rows, samples] */
    u64 status;  /* int64 status word per row */
    u64 src;     /* weights of the launch's first row */
    u64 slot;
    u64 part;    /* 16 bytes per (row, tile): {double total; u32 positives; u32 bad} */
    u64 count;   /* u32 per row, zero between launches */
    i64 rows;
    i64 cats;
    i64 samples;
    i64 tiles;
    i64 row0;    /* the launch's first row among the op's (its Philox blocks) */
    u64 seed;
    u64 offset;
    i64 repl;
};

/* Blocks an SM holds at once (64 registers a thread for float-kept weights: the 416 blocks of
   32 rows of a GPT-2 vocabulary fit one wave of an H100). */
#define MUL_MIN_BLOCKS (sizeof(TS) == 8 ? 3 : 4)

struct MulPart {
    double total;
    u32 pos;
    u32 bad;
};

struct MulShared {
    double wt[8];
    double tt[MTILES];
    u32 taken[MT / 32];
    double p, x;
    i64 prev, pick, tile;
    int hit, mode, last, is_last;
    u32 pos, bad;
};

/* A weight as a thread keeps it: f64 weights as double, the others as float (exact; every sum
   is in double). */
template <int N> struct MulKeep { typedef float T; };
template <> struct MulKeep<8> { typedef double T; };
typedef MulKeep<sizeof(TS)>::T TW;
__device__ __forceinline__ TW mul_w(TS x) {
    if constexpr (sizeof(TS) == 8) {
        return to_d(x);
    } else {
        return to_f(x);
    }
}

/* Thread t's 16 weights of the tile from lo (0 past the row; 0 where taken's bit is set). */
__device__ __forceinline__ void mul_load(const TS* row, i64 cats, i64 lo, const u32* taken, TW v[MV]) {
    const int t = threadIdx.x;
    const TS* at = row + lo + 4 * t;
    const i64 left = cats - lo - 4 * t;
#pragma unroll
    for (int u = 0; u < MV; u++) {
        const int o = 1024 * (u >> 2) + (u & 3);
        v[u] = o < left ? mul_w(at[o]) : (TW)0;
    }
    if (taken) {
#pragma unroll
        for (int u = 0; u < MV; u++) {
            const int o = 1024 * (u >> 2) + 4 * t + (u & 3);
            if ((taken[o >> 5] >> (o & 31)) & 1u) v[u] = (TW)0;
        }
    }
}

__device__ __forceinline__ double mul_sum(const TW v[MV]) {
    double s = 0.0;
#pragma unroll
    for (int u = 0; u < MV; u++) s = __dadd_rn(s, (double)v[u]);
    return s;
}

/* The block's scan of the threads' sums s: thread t's start in the tile (B_w + the scan of
   lane l - 1); *total: the tile's total. Two barriers (sh->wt is reused after). */
__device__ __forceinline__ double mul_scan(double s, MulShared* sh, double* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double v = s;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const double o = __shfl_up_sync(FULL, v, d);
        if (lane >= d) v = __dadd_rn(o, v);
    }
    double ex = __shfl_up_sync(FULL, v, 1);
    if (lane == 0) ex = 0.0;
    if (lane == 31) sh->wt[warp] = v;
    __syncthreads();
    double b = 0.0;
    for (int w = 0; w < warp; w++) b = __dadd_rn(b, sh->wt[w]);
    double tot = b;
    for (int w = warp; w < 8; w++) tot = __dadd_rn(tot, sh->wt[w]);
    *total = tot;
    __syncthreads();
    return __dadd_rn(b, ex);
}

/* The taken bitmap of the tile from lo: the picks out[0..k) in it (barriers before and after). */
__device__ void mul_taken(const i64* out, i64 k, i64 lo, MulShared* sh) {
    __syncthreads();
    for (int i = threadIdx.x; i < MT / 32; i += blockDim.x) sh->taken[i] = 0u;
    __syncthreads();
    for (i64 j = threadIdx.x; j < k; j += blockDim.x) {
        const i64 o = out[j] - lo;
        if (o >= 0 && o < MT) atomicOr(&sh->taken[o >> 5], 1u << (o & 31));
    }
    __syncthreads();
}

/* Whether out[0..k) holds c. */
__device__ __forceinline__ bool mul_chosen(const i64* out, i64 k, i64 c) {
    for (i64 j = 0; j < k; j++) {
        if (out[j] == c) return true;
    }
    return false;
}

/* Sample k of row r, thread 0's part: the total of the tiles' weights not yet chosen (sh->tt),
   the draw x below it, and the tile whose running total first passes x (sh->tile, its start
   sh->p; mode 0). Mode 1: no tile's end above x (rounding), the last tile with weight; mode 2:
   a total not positive and finite. */
__device__ __forceinline__ void mul_pick_tile(const MulP& p, i64 r, i64 k, MulShared* sh) {
    double total = 0.0;
    for (i64 j = 0; j < p.tiles; j++) total = __dadd_rn(total, sh->tt[j]);
    sh->hit = 256;
    sh->last = -1;
    sh->pick = -1;
    if (!(total > 0.0 && isfinite(total))) {
        sh->mode = 2;
    } else {
        u64 seed = p.seed, base = p.offset;
        if (p.slot) {
            const u64* sl = (const u64*)p.slot;
            seed = sl[0];
            base = sl[1] + p.offset;
        }
        u32 wv[4];
        philox(seed, base + (u64)((p.row0 + r) * p.samples + k), wv);
        const double x = __dmul_rn(__dmul_rn((double)u53(wv[0], wv[1]), p2n(53)), total);
        double start = 0.0;
        i64 j = 0;
        for (; j < p.tiles; j++) {
            if (__dadd_rn(start, sh->tt[j]) > x) break;
            start = __dadd_rn(start, sh->tt[j]);
        }
        sh->mode = 0;
        if (j == p.tiles) {
            /* No tile's end above x: the last tile with weight, its last positive. */
            sh->mode = 1;
            for (j = p.tiles - 1; j > 0 && !(sh->tt[j] > 0.0); j--) {
            }
        }
        sh->tile = j;
        sh->p = start;
        sh->x = x;
    }
}

/* Sample k of a row (the last block of the row, every thread): sh->tt holds the tiles' totals
   (the weights not yet chosen), sh->prev the previous pick. */
__device__ void mul_sample(const MulP& p, i64 r, i64 k, MulShared* sh) {
    const int t = threadIdx.x;
    const TS* row = (const TS*)p.src + r * p.cats;
    i64* out = (i64*)p.dst + r * p.samples;
    const bool repl = p.repl != 0;
    const bool masked = !repl && k > 0;
    TW v[MV];
    double tot;
    if (masked) {
        /* Only the previous pick's tile changed. */
        const i64 jp = sh->prev / MT;
        mul_taken(out, k, jp * MT, sh);
        mul_load(row, p.cats, jp * MT, sh->taken, v);
        mul_scan(mul_sum(v), sh, &tot);
        if (t == 0) sh->tt[jp] = tot;
        __syncthreads();
    }
    if (t == 0) mul_pick_tile(p, r, k, sh);
    __syncthreads();
    if (sh->mode == 2) {
        /* A row whose total is not positive and finite: the first category not yet chosen. */
        if (t == 0) {
            i64 c = 0;
            while (!repl && c < p.cats && mul_chosen(out, k, c)) c++;
            out[k] = c < p.cats ? c : 0;
            sh->prev = out[k];
        }
        __syncthreads();
        return;
    }
    const i64 lo = sh->tile * MT;
    if (masked) {
        mul_taken(out, k, lo, sh);
    }
    mul_load(row, p.cats, lo, masked ? sh->taken : nullptr, v);
    const double s = mul_sum(v);
    const double e = __dadd_rn(sh->p, mul_scan(s, sh, &tot));
    const double x = sh->x;
    if (sh->mode == 0 && __dadd_rn(e, s) > x) atomicMin(&sh->hit, t);
    __syncthreads();
    if (t == sh->hit) {
        double run = 0.0;
        i64 mine = -1;
#pragma unroll
        for (int u = 0; u < MV; u++) {
            run = __dadd_rn(run, (double)v[u]);
            if (mine < 0 && v[u] > (TW)0 && __dadd_rn(e, run) > x) mine = lo + 1024 * (u >> 2) + 4 * t + (u & 3);
        }
        sh->pick = mine;
    }
    __syncthreads();
    if (sh->pick < 0) {
        /* Rounding (or no tile above x): the tile's last category of positive weight. */
        int mine = -1;
#pragma unroll
        for (int u = 0; u < MV; u++) {
            if (v[u] > (TW)0) mine = 1024 * (u >> 2) + 4 * t + (u & 3);
        }
        if (mine >= 0) atomicMax(&sh->last, mine);
        __syncthreads();
        if (t == 0) sh->pick = sh->last < 0 ? 0 : lo + sh->last;
        __syncthreads();
    }
    if (t == 0) {
        out[k] = sh->pick;
        sh->prev = sh->pick;
    }
    __syncthreads();
}

/* The weights' check of thread t's 16 weights: (positives, bad). */
__device__ __forceinline__ void mul_check(const TW v[MV], u32& pos, u32& bad) {
    pos = 0;
    bad = 0;
#pragma unroll
    for (int u = 0; u < MV; u++) {
        pos += v[u] > (TW)0 ? 1u : 0u;
        bad |= (v[u] >= (TW)0 && !isinf(v[u])) ? 0u : 1u;
    }
}

extern "C" __global__ void __launch_bounds__(256, MUL_MIN_BLOCKS) rnd(MulP p) {
    cs_enter();
    __shared__ MulShared sh;
    const int t = threadIdx.x;
    const i64 r = blockIdx.x / p.tiles, j = blockIdx.x % p.tiles;
    const TS* row = (const TS*)p.src + r * p.cats;
    if (t == 0) {
        sh.pos = 0;
        sh.bad = 0;
    }
    TW v[MV];
    mul_load(row, p.cats, j * MT, nullptr, v);
    u32 pos, bad;
    mul_check(v, pos, bad);
    double tot;
    mul_scan(mul_sum(v), &sh, &tot);
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) pos += __shfl_xor_sync(FULL, pos, d);
    if ((t & 31) == 0 && pos) atomicAdd(&sh.pos, pos);
    if (__syncthreads_or(bad) && t == 0) sh.bad = 1;
    __syncthreads();
    if (p.tiles > 1) {
        MulPart* part = (MulPart*)p.part + r * p.tiles;
        u32* count = (u32*)p.count + r;
        if (t == 0) {
            part[j].total = tot;
            part[j].pos = sh.pos;
            part[j].bad = sh.bad;
            __threadfence();
            sh.is_last = atomicAdd(count, 1u) == (u32)(p.tiles - 1);
        }
        __syncthreads();
        if (!sh.is_last) return;
        /* The row's last block: every tile's partial is written and visible. */
        __threadfence();
        if (t == 0) {
            *count = 0u;
            sh.pos = 0;
            sh.bad = 0;
        }
        __syncthreads();
        u32 mp = 0, mb = 0;
        for (i64 i = t; i < p.tiles; i += blockDim.x) {
            sh.tt[i] = __ldcg(&part[i].total);
            mp += __ldcg(&part[i].pos);
            mb |= __ldcg(&part[i].bad);
        }
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) mp += __shfl_xor_sync(FULL, mp, d);
        if ((t & 31) == 0 && mp) atomicAdd(&sh.pos, mp);
        if (__syncthreads_or(mb) && t == 0) sh.bad = 1;
        __syncthreads();
    } else if (t == 0) {
        sh.tt[0] = tot;
    }
    if (t == 0) {
        i64 st = sh.bad ? 1 : 0;
        if (sh.pos == 0) st |= 2;
        if (!p.repl && (i64)sh.pos < p.samples) st |= 4;
        ((i64*)p.status)[r] = st;
    }
    __syncthreads();
    for (i64 k = 0; k < p.samples; k++) mul_sample(p, r, k, &sh);
}
#else
/* A permutation of 0..n: the indices sorted by (key, index) (kernel/random.rs), by a bitonic
   network on dst whose blocks all sort ascending (each merge's first step compares mirrored
   positions, i and i ^ (k - 1)), so the positions past n act as +infinity and never move.
   Launch vec = 0 writes the identity; then a launch per step (low = k, range = j) compares and
   exchanges its pairs, each key recomputed from Philox. */
__device__ __forceinline__ u64 perm_key(u64 seed, u64 base, i64 v) {
    u32 w[4];
    philox(seed, base + (u64)(v >> 1), w);
    const int j = (int)(v & 1) * 2;
    return ((u64)w[j] << 32) | (u64)w[j + 1];
}

extern "C" __global__ void __launch_bounds__(256) rnd(RndP p) {
    cs_enter();
    u64 seed, base;
    rnd_stream(p, seed, base);
    TS* a = (TS*)p.dst;
    const i64 step = (i64)gridDim.x * blockDim.x;
    const i64 first = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (p.vec == 0) {
        for (i64 i = first; i < p.n; i += step) a[i] = from_i(i);
        return;
    }
    const i64 k = p.low, j = (i64)p.range;
    for (i64 i = first; i < p.n; i += step) {
        const i64 l = j == k / 2 ? (i ^ (k - 1)) : (i ^ j);
        if (l <= i || l >= p.n) continue;
        const i64 vi = to_i(a[i]), vl = to_i(a[l]);
        const u64 ki = perm_key(seed, base, vi), kl = perm_key(seed, base, vl);
        if (ki > kl || (ki == kl && vi > vl)) {
            a[i] = from_i(vl);
            a[l] = from_i(vi);
        }
    }
}
#endif
