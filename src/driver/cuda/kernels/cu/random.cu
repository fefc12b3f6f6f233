// The random kernel `rnd`, after random_head.cu: the Philox4x32-10 stream mapping of
// src/kernel/random.rs (element i from block offset + i / E), each thread a block of E elements
// written once. All float math is explicit correctly rounded double operations (no contraction
// into FMA), so the values are the CPU kernel's bit for bit, except where log / sin / cos enter
// (libdevice's double functions: a few ulp of double; see TRANSCENDENTAL_ULP_F64).

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
};

struct __align__(sizeof(TS) * E) RndPack { TS v[E]; };

__device__ __forceinline__ double p2n(int k) { return __longlong_as_double((i64)(1023 - k) << 52); }
__device__ __forceinline__ u64 u53(u32 a, u32 b) { return ((u64)a << 21) | ((u64)b >> 11); }

__device__ __forceinline__ void philox(u64 seed, u64 block, u32 w[4]) {
    u32 c0 = (u32)block, c1 = (u32)(block >> 32), c2 = 0u, c3 = 0u;
    u32 k0 = (u32)seed, k1 = (u32)(seed >> 32);
#pragma unroll
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const u32 hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const u32 hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        const u32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
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

__device__ __forceinline__ void rnd_stream(const RndP& p, u64& seed, u64& base) {
    seed = p.seed;
    base = p.offset;
    if (p.slot) {
        const u64* s = (const u64*)p.slot;
        seed = s[0];
        base = s[1] + p.offset;
    }
}

#if DIST < 6
/* The E elements of a block of words w, the first being element i0. */
__device__ __forceinline__ void values(const RndP& p, const u32 w[4], i64 i0, RndPack& out) {
#if DIST == 1
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
        out.v[j] = from_d(__dmul_rn((double)w[j], p2n(32)) < p.a ? 1.0 : 0.0);
#elif DIST == 4
        const TS* src = (const TS*)p.src;
        const double x = i0 + j < p.n ? to_d(src[i0 + j]) : 0.0;
        out.v[j] = from_d(__dmul_rn(x, __dmul_rn((double)w[j], p2n(32)) < p.a ? p.b : 0.0));
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

extern "C" __global__ void __launch_bounds__(256) rnd(RndP p) {
    cs_enter();
    u64 seed, base;
    rnd_stream(p, seed, base);
    TS* dst = (TS*)p.dst;
    const i64 blocks = (p.n + E - 1) / E;
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x; b < blocks; b += step) {
        u32 w[4];
        philox(seed, base + (u64)b, w);
        const i64 i0 = b * E;
        RndPack out;
        values(p, w, i0, out);
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

#elif DIST == 6
/* Multinomial rows (src: weights of TS, [n rows, low categories]; dst: int64 [n, range samples];
   vec: with replacement), a thread per row, as the CPU kernel's multinomial_row. */
__device__ __forceinline__ bool rnd_taken(const i64* out, i64 k, i64 c) {
    for (i64 j = 0; j < k; j++) {
        if (out[j] == c) return true;
    }
    return false;
}

extern "C" __global__ void __launch_bounds__(256) rnd(RndP p) {
    cs_enter();
    u64 seed, base;
    rnd_stream(p, seed, base);
    const i64 rows = p.n, cats = p.low, samples = (i64)p.range;
    const bool repl = p.vec != 0;
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += step) {
        const TS* row = (const TS*)p.src + r * cats;
        i64* out = (i64*)p.dst + r * samples;
        for (i64 k = 0; k < samples; k++) {
            u32 w[4];
            philox(seed, base + (u64)(r * samples + k), w);
            double total = 0.0;
            for (i64 c = 0; c < cats; c++) {
                if (repl || !rnd_taken(out, k, c)) total = __dadd_rn(total, to_d(row[c]));
            }
            i64 pick = -1;
            if (!(total > 0.0 && isfinite(total))) {
                pick = 0;
                if (!repl) {
                    for (i64 c = 0; c < cats; c++) {
                        if (!rnd_taken(out, k, c)) {
                            pick = c;
                            break;
                        }
                    }
                }
            } else {
                const double t = __dmul_rn(__dmul_rn((double)u53(w[0], w[1]), p2n(53)), total);
                double run = 0.0;
                i64 last = 0;
                for (i64 c = 0; c < cats; c++) {
                    if (!repl && rnd_taken(out, k, c)) continue;
                    const double pc = to_d(row[c]);
                    run = __dadd_rn(run, pc);
                    if (pc > 0.0) last = c;
                    if (run > t) {
                        pick = c;
                        break;
                    }
                }
                if (pick < 0) pick = last;
            }
            out[k] = pick;
        }
    }
}
#else
/* A permutation of 0..n into dst by Fisher-Yates from the identity, on one thread. */
extern "C" __global__ void __launch_bounds__(256) rnd(RndP p) {
    cs_enter();
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    u64 seed, base;
    rnd_stream(p, seed, base);
    TS* a = (TS*)p.dst;
    for (i64 i = 0; i < p.n; i++) a[i] = from_i(i);
    for (i64 s = 0; s + 1 < p.n; s++) {
        const i64 i = p.n - 1 - s;
        u32 w[4];
        philox(seed, base + (u64)s, w);
        const u64 j = (((u64)w[0] << 32) | (u64)w[1]) % (u64)(i + 1);
        const TS t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}
#endif
