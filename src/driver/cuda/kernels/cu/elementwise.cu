// The elementwise kernels, after elementwise_head.cu's T0..T2, TO, NIN, VEC, UNROLL, TILE, `apply`
// and FAST_GUARD (with `fast_pack`, `apply_fast_f` and `fast_pair` where it is 1).
// The entry points (ew_f<mask>, ew_t<mask>, and ew_g<mask> where the card picks the vectors per
// thread) are appended per module by kernels/codegen.rs.

/* `early`: launched with programmatic stream serialization whatever the grid (`cs_enter_when`). */
struct EwFast { char* out; const char* in0; const char* in1; const char* in2; u64 n; u64 value; int vec; int early; };
/* Up to MAXD collapsed dims, innermost first: sizes, each operand's strides (output first),
   and with `div` set each size's multiply-shift division (`magic`, `shift`: the index fits
   32 bits). With `b.vec` set (the vector lane, `strided.rs`), the dims count vectors of VEC
   elements: dim 0's size is in vectors and its strides are VEC times the elements' strides. */
struct EwStrided { EwFast b; int ndim; int div; i64 shape[MAXD]; i64 st[4][MAXD]; u32 magic[MAXD]; u32 shift[MAXD]; };

template <typename T, bool SCALAR, bool ACTIVE>
__device__ __forceinline__ Pack<T, VEC> get_vec(const T* p, u64 i, T s) {
    Pack<T, VEC> k;
    if (!ACTIVE || SCALAR) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) k.v[j] = s;
    } else {
        k = ldv<T, VEC>(p + i * VEC);
    }
    return k;
}
template <typename T, bool SCALAR, bool ACTIVE>
__device__ __forceinline__ T get_one(const T* p, u64 i, T s) { return (!ACTIVE || SCALAR) ? s : p[i]; }

#define A_ARGS T0, (MASK & 1) != 0, (NIN > 0)
#define B_ARGS T1, (MASK & 2) != 0, (NIN > 1)
#define C_ARGS T2, (MASK & 4) != 0, (NIN > 2)

/* `apply` on every lane of a vector. A module with FAST_GUARD (a half-type result computed in
   float, so its vectors hold an even number of lanes) has a branch-free form, `apply_fast_f` (the
   float before its rounding): `fast_pack` says whether every lane may take it (a per-element
   branch to a rare slow path tested once a vector; always for some), and `fast_pair` rounds two
   lanes' floats at once. Both paths write the vector as 32-bit pairs, so that the pairs reach the
   store as they were rounded (where the paths join in 16-bit lanes, ptxas splits and packs them
   again). */
template <int N>
__device__ __forceinline__ Pack<TO, N> apply_pack(const Pack<T0, N>& a, const Pack<T1, N>& b, const Pack<T2, N>& c, u64 value) {
#if FAST_GUARD
    static_assert(N % 2 == 0 && sizeof(TO) == 2, "FAST_GUARD: half-type pairs");
    union { u32 w[N / 2]; Pack<TO, N> k; } u;
    if (fast_pack<N>(a)) {
#pragma unroll
        for (int j = 0; j < N; j += 2)
            u.w[j / 2] = fast_pair(apply_fast_f(a.v[j], b.v[j], c.v[j], value),
                                   apply_fast_f(a.v[j + 1], b.v[j + 1], c.v[j + 1], value));
    } else {
#pragma unroll
        for (int j = 0; j < N; j += 2)
            u.w[j / 2] = (u32)apply(a.v[j], b.v[j], c.v[j], value) |
                         ((u32)apply(a.v[j + 1], b.v[j + 1], c.v[j + 1], value) << 16);
    }
    return u.k;
#else
    Pack<TO, N> r;
#pragma unroll
    for (int j = 0; j < N; ++j) r.v[j] = apply(a.v[j], b.v[j], c.v[j], value);
    return r;
#endif
}

/* At most one block of elements: a thread each, no loop (a tiny op's kernel is its launch and
   its latency, which in a graph is all a node costs). */
template <int MASK>
__device__ __forceinline__ void ew_tiny(const EwFast& p) {
    const u32 i = threadIdx.x;
    if (i >= (u32)p.n) return;
    const T0* a = (const T0*)p.in0;
    const T1* b = (const T1*)p.in1;
    const T2* c = (const T2*)p.in2;
    T0 sa = T0();
    T1 sb = T1();
    T2 sc = T2();
    if (NIN > 0 && (MASK & 1)) sa = a[0];
    if (NIN > 1 && (MASK & 2)) sb = b ? b[0] : imm<T1>(p.value);
    if (NIN > 2 && (MASK & 4)) sc = c[0];
    ((TO*)p.out)[i] = apply(get_one<A_ARGS>(a, i, sa), get_one<B_ARGS>(b, i, sb), get_one<C_ARGS>(c, i, sc), p.value);
}

/* UNR: the loop takes two vectors at a time (UNROLL: the module's choice for ew_f*; ew_g* of the
   functions whose vectors per thread are the card's take one, fewer registers). */
template <int MASK, int UNR>
__device__ __forceinline__ void ew_fast(const EwFast& p) {
    const u64 n = p.n;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 step = (u64)gridDim.x * blockDim.x;
    TO* out = (TO*)p.out;
    const T0* a = (const T0*)p.in0;
    const T1* b = (const T1*)p.in1;
    const T2* c = (const T2*)p.in2;
    T0 sa = T0();
    T1 sb = T1();
    T2 sc = T2();
    if (NIN > 0 && (MASK & 1)) sa = a[0];
    if (NIN > 1 && (MASK & 2)) sb = b ? b[0] : imm<T1>(p.value);
    if (NIN > 2 && (MASK & 4)) sc = c[0];
    u64 start = 0;
    if (VEC > 1 && p.vec) {
        const u64 nv = n / VEC;
        u64 i = tid;
        for (; UNR && i + step < nv; i += 2 * step) {
            const Pack<T0, VEC> a0 = get_vec<A_ARGS>(a, i, sa), a1 = get_vec<A_ARGS>(a, i + step, sa);
            const Pack<T1, VEC> b0 = get_vec<B_ARGS>(b, i, sb), b1 = get_vec<B_ARGS>(b, i + step, sb);
            const Pack<T2, VEC> c0 = get_vec<C_ARGS>(c, i, sc), c1 = get_vec<C_ARGS>(c, i + step, sc);
            const Pack<TO, VEC> r0 = apply_pack<VEC>(a0, b0, c0, p.value), r1 = apply_pack<VEC>(a1, b1, c1, p.value);
            stv<TO, VEC>(out + i * VEC, r0);
            stv<TO, VEC>(out + (i + step) * VEC, r1);
        }
        /* The last vector (or, not unrolled, every vector). */
        for (; i < nv; i += step) {
            const Pack<T0, VEC> a0 = get_vec<A_ARGS>(a, i, sa);
            const Pack<T1, VEC> b0 = get_vec<B_ARGS>(b, i, sb);
            const Pack<T2, VEC> c0 = get_vec<C_ARGS>(c, i, sc);
            const Pack<TO, VEC> r0 = apply_pack<VEC>(a0, b0, c0, p.value);
            stv<TO, VEC>(out + i * VEC, r0);
        }
        start = nv * VEC;
    }
    for (u64 i = start + tid; i < n; i += step) {
        out[i] = apply(get_one<A_ARGS>(a, i, sa), get_one<B_ARGS>(b, i, sb), get_one<C_ARGS>(c, i, sc), p.value);
    }
}

/* Two collapsed dims (inner `inner` elements, then rows) and a dense output: every input is
   dense along the inner dim (class 0: vector loads), constant along it (class 1: a row value,
   a broadcast column, a number), or strided (class 2: gathered). Row and column come from one
   multiply-shift division (`magic`, `shift`) unless the elements pass 2^32 (`wide`). The tiled
   kernel also takes `batch` such matrices of `rows` rows each, the output's one after another
   and each input's `sb` elements apart (a batched transpose; `batch` 1 otherwise). */
struct EwTwo { EwFast b; u64 inner; i64 so[3]; i64 si[3]; int cls[3]; u32 magic; u32 shift; int wide; int pad;
               u64 rows; u64 batch; i64 sb[3]; };

__device__ __forceinline__ u64 two_row(const EwTwo& p, u64 e) {
    if (p.wide) return e / p.inner;
    const u32 x = (u32)e;
    return ((u64)__umulhi(x, p.magic) + x) >> p.shift;
}
template <typename T>
__device__ __forceinline__ T two_one(const EwTwo& p, int k, const T* base, u64 row, u64 col, T s) {
    return base ? base[(i64)row * p.so[k] + (i64)col * p.si[k]] : s;
}
template <typename T, int K>
__device__ __forceinline__ Pack<T, VEC> two_vec(const EwTwo& p, const T* base, u64 row, u64 col, T s) {
    Pack<T, VEC> v;
    if (K >= NIN || !base) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v.v[j] = s;
        return v;
    }
    const T* q = base + (i64)row * p.so[K];
    if (p.cls[K] == 0) return ldv<T, VEC>(q + col);
    if (p.cls[K] == 1) {
        const T x = q[0];
#pragma unroll
        for (int j = 0; j < VEC; ++j) v.v[j] = x;
        return v;
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) v.v[j] = q[(i64)(col + j) * p.si[K]];
    return v;
}

extern "C" __global__ void __launch_bounds__(256) ew_2d(const __grid_constant__ EwTwo p) {
    cs_enter();
    const u64 n = p.b.n;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 step = (u64)gridDim.x * blockDim.x;
    TO* out = (TO*)p.b.out;
    const T0* a = (const T0*)p.b.in0;
    const T1* b = (const T1*)p.b.in1;
    const T2* c = (const T2*)p.b.in2;
    const T1 sb = (NIN > 1 && !b) ? imm<T1>(p.b.value) : T1();
    if (VEC > 1 && p.b.vec) {
        for (u64 i = tid; i < n / VEC; i += step) {
            const u64 e = i * VEC, row = two_row(p, e), col = e - row * p.inner;
            const Pack<T0, VEC> x0 = two_vec<T0, 0>(p, a, row, col, T0());
            const Pack<T1, VEC> x1 = two_vec<T1, 1>(p, b, row, col, sb);
            const Pack<T2, VEC> x2 = two_vec<T2, 2>(p, c, row, col, T2());
            const Pack<TO, VEC> r = apply_pack<VEC>(x0, x1, x2, p.b.value);
            stv<TO, VEC>(out + e, r);
        }
        return;
    }
    for (u64 e = tid; e < n; e += step) {
        const u64 row = two_row(p, e), col = e - row * p.inner;
        const T0 x0 = NIN > 0 ? two_one<T0>(p, 0, a, row, col, T0()) : T0();
        const T1 x1 = NIN > 1 ? two_one<T1>(p, 1, b, row, col, sb) : T1();
        const T2 x2 = NIN > 2 ? two_one<T2>(p, 2, c, row, col, T2()) : T2();
        out[e] = apply(x0, x1, x2, p.b.value);
    }
}

/* Two collapsed dims with a dense output and some input transposed (class 3: contiguous along
   the outer dim): TILE x TILE tiles, each transposed input staged through shared memory so that
   both its reads and the output's writes are coalesced (TILE: `codegen::tile_edge`). Rows of
   the shared tiles are padded to a multiple of 4 bytes plus one word, so that a warp reading a
   tile's row across its columns hits 32 banks. When every pointer, stride and extent is a
   multiple of TV elements (`tile_vec`), each thread moves TV elements with one access (the
   tile's columns from the transposed inputs, the rows of the dense ones and of the output),
   so that the address arithmetic is paid once per TV elements; else one element at a time. */
#define TPAD(T) (sizeof(T) >= 4 ? 1 : 4 / sizeof(T))
#define TMAX(x, y) ((x) > (y) ? (x) : (y))
#define TSZ TMAX(TMAX(sizeof(TO), sizeof(T0)), TMAX(NIN > 1 ? sizeof(T1) : 1, NIN > 2 ? sizeof(T2) : 1))
#define TVMAX (TILE == 64 ? 8 : 4)
#define TV (TVMAX < 16 / TSZ ? TVMAX : 16 / TSZ)
#define TL (TILE / TV)
#define TPASS (TILE * TL / 256)
/* Two-byte elements (u16) of a transposed input move through shared memory in pairs (TILE 64,
   TV 8): a thread loads two adjacent columns of TV rows and stores each row's two elements as
   one word of a tile of 64 rows of 32 words (row-major: the output's orientation), row r's
   words XOR-swizzled by 4 * (r / 8 % 8), so that a warp's word stores and its 16-byte loads of
   four words of a row hit distinct banks: a quarter of the shared accesses of one element each.
   Only in the modules `codegen::tile_pairs` names (TILE_PAIRS), which are compiled for a full
   SM's blocks (TILE_BOUNDS): the pairs' registers cost the others their occupancy. */
#define TPAIRS(T) (TILE_PAIRS && sizeof(T) == 2 && TILE == 64 && TV == 8)
__device__ __forceinline__ int pair_word(int r, int w) { return r * 32 + (w ^ (((r >> 3) & 7) << 2)); }
template <typename T>
__device__ __forceinline__ bool tile_fits(const EwTwo& p, int k, const T* base, u64 rows) {
    if (k >= NIN || p.cls[k] == 1) return true;
    if (p.cls[k] == 2 || ((u64)base % (TV * sizeof(T))) != 0 || p.sb[k] % TV != 0) return false;
    return p.cls[k] == 3 ? (p.si[k] % TV == 0 && rows % TV == 0) : (p.so[k] % TV == 0);
}
__device__ __forceinline__ bool tile_vec(const EwTwo& p, u64 rows) {
    return p.inner % TV == 0 && ((u64)p.b.out % (TV * sizeof(TO))) == 0 &&
           tile_fits<T0>(p, 0, (const T0*)p.b.in0, rows) && tile_fits<T1>(p, 1, (const T1*)p.b.in1, rows) &&
           tile_fits<T2>(p, 2, (const T2*)p.b.in2, rows);
}
/* A transposed input's tile, TV rows of one column per access. */
template <typename T, int K>
__device__ __forceinline__ void tile_in(const EwTwo& p, const T* base, T (*t)[TILE + TPAD(T)], u64 r0, u64 c0,
                                        u64 rows) {
    if (K >= NIN || p.cls[K] != 3) return;
    if (TPAIRS(T)) {
        const int cp = threadIdx.x / 8, r = (threadIdx.x % 8) * 8;
        const u64 col = c0 + 2 * cp, row = r0 + r;
        if (col < p.inner && row < rows) {
            const Pack<T, TV> v0 = ldv<T, TV>(base + (i64)row + (i64)col * p.si[K]);
            const Pack<T, TV> v1 = ldv<T, TV>(base + (i64)row + (i64)(col + 1) * p.si[K]);
            u32* w = (u32*)&t[0][0];
#pragma unroll
            for (int i = 0; i < TV; ++i) w[pair_word(r + i, cp)] = (u32)v0.v[i] | ((u32)v1.v[i] << 16);
        }
        return;
    }
    const int lr = (threadIdx.x % TL) * TV;
    Pack<T, TV> v[TPASS];
#pragma unroll
    for (int q = 0; q < TPASS; ++q) {
        const u64 col = c0 + threadIdx.x / TL + q * (256 / TL), row = r0 + lr;
        if (col < p.inner && row < rows) v[q] = ldv<T, TV>(base + (i64)row + (i64)col * p.si[K]);
    }
#pragma unroll
    for (int q = 0; q < TPASS; ++q) {
        const int lc = threadIdx.x / TL + q * (256 / TL);
#pragma unroll
        for (int i = 0; i < TV; ++i) t[lc][lr + i] = v[q].v[i];
    }
}
/* TV consecutive columns of one row of input K: from its tile, its row, or its one value. */
template <typename T, int K>
__device__ __forceinline__ Pack<T, TV> tile_row(const EwTwo& p, const T* base, const T (*t)[TILE + TPAD(T)], int lr,
                                                int lc, u64 row, u64 col, T s) {
    Pack<T, TV> v;
    if (K < NIN && p.cls[K] == 3 && TPAIRS(T)) {
        union { uint4 r; Pack<T, TV> k; } u;
        u.r = *reinterpret_cast<const uint4*>((const u32*)&t[0][0] + pair_word(lr, lc / 2));
        return u.k;
    }
    if (K < NIN && p.cls[K] == 3) {
#pragma unroll
        for (int i = 0; i < TV; ++i) v.v[i] = t[lc + i][lr];
        return v;
    }
    if (K < NIN && base && p.cls[K] == 0) return ldv<T, TV>(base + (i64)row * p.so[K] + (i64)col);
    const T x = (K < NIN && base) ? base[(i64)row * p.so[K]] : s;
#pragma unroll
    for (int i = 0; i < TV; ++i) v.v[i] = x;
    return v;
}
extern "C" __global__ void TILE_BOUNDS ew_tile(const __grid_constant__ EwTwo p) {
    cs_enter();
    /* Pairs are read back 16 bytes at a time; other modules keep their elements' alignment
       (a wider one cost a three-tile `where` nine registers). */
    __shared__ __align__(TILE_PAIRS ? 16 : sizeof(T0)) T0 t0[NIN > 0 ? TILE : 1][TILE + TPAD(T0)];
    __shared__ __align__(TILE_PAIRS ? 16 : sizeof(T1)) T1 t1[NIN > 1 ? TILE : 1][TILE + TPAD(T1)];
    __shared__ __align__(TILE_PAIRS ? 16 : sizeof(T2)) T2 t2[NIN > 2 ? TILE : 1][TILE + TPAD(T2)];
    const u64 inner = p.inner, rows = p.rows;
    const u64 tc = (inner + TILE - 1) / TILE, tiles = tc * ((rows + TILE - 1) / TILE);
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const T1 sb = (NIN > 1 && !p.b.in1) ? imm<T1>(p.b.value) : T1();
    const bool vec = tile_vec(p, rows);
    for (u64 bt = blockIdx.x; bt < tiles * p.batch; bt += gridDim.x) {
        /* The matrix of the batch (one division per tile, none without a batch) and its bases. */
        const u64 m = p.batch > 1 ? bt / tiles : 0, t = bt - m * tiles;
        TO* out = (TO*)p.b.out + m * rows * inner;
        const T0* a = (const T0*)p.b.in0 + (i64)m * p.sb[0];
        const T1* b = p.b.in1 ? (const T1*)p.b.in1 + (i64)m * p.sb[1] : (const T1*)0;
        const T2* c = (const T2*)p.b.in2 + (i64)m * p.sb[2];
        const u64 tr = tiles <= 0xffffffffull ? (u64)((u32)t / (u32)tc) : t / tc;
        const u64 r0 = tr * TILE, c0 = (t - tr * tc) * TILE;
        __syncthreads();
        if (vec) {
            tile_in<T0, 0>(p, a, t0, r0, c0, rows);
            tile_in<T1, 1>(p, b, t1, r0, c0, rows);
            tile_in<T2, 2>(p, c, t2, r0, c0, rows);
            __syncthreads();
            const int lc = (threadIdx.x % TL) * TV;
#pragma unroll
            for (int q = 0; q < TPASS; ++q) {
                const int lr = threadIdx.x / TL + q * (256 / TL);
                const u64 row = r0 + lr, col = c0 + lc;
                if (row < rows && col < inner) {
                    const Pack<T0, TV> x0 = tile_row<T0, 0>(p, a, t0, lr, lc, row, col, T0());
                    const Pack<T1, TV> x1 = tile_row<T1, 1>(p, b, t1, lr, lc, row, col, sb);
                    const Pack<T2, TV> x2 = tile_row<T2, 2>(p, c, t2, lr, lc, row, col, T2());
                    const Pack<TO, TV> r = apply_pack<TV>(x0, x1, x2, p.b.value);
                    stv<TO, TV>(out + row * inner + col, r);
                }
            }
            continue;
        }
        /* Transposed inputs: the tile's column lc holds rows r0.. (contiguous in memory). */
#pragma unroll
        for (int j = 0; j < TILE / 8; ++j) {
            const int lc = ty + 8 * j;
            const u64 col = c0 + lc;
#pragma unroll
            for (int h = 0; h < TILE / 32; ++h) {
                const int lr = tx + 32 * h;
                const u64 row = r0 + lr;
                if (col < inner && row < rows) {
                    if (NIN > 0 && p.cls[0] == 3) t0[lc][lr] = a[(i64)row + (i64)col * p.si[0]];
                    if (NIN > 1 && p.cls[1] == 3) t1[lc][lr] = b[(i64)row + (i64)col * p.si[1]];
                    if (NIN > 2 && p.cls[2] == 3) t2[lc][lr] = c[(i64)row + (i64)col * p.si[2]];
                }
            }
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < TILE / 8; ++j) {
            const int lr = ty + 8 * j;
            const u64 row = r0 + lr;
#pragma unroll
            for (int h = 0; h < TILE / 32; ++h) {
                const int lc = tx + 32 * h;
                const u64 col = c0 + lc;
                if (row < rows && col < inner) {
                    T0 x0 = T0();
                    T1 x1 = sb;
                    T2 x2 = T2();
                    if (NIN > 0) x0 = p.cls[0] == 3 ? t0[lc][lr] : two_one<T0>(p, 0, a, row, col, T0());
                    if (NIN > 1) x1 = p.cls[1] == 3 ? t1[lc][lr] : two_one<T1>(p, 1, b, row, col, sb);
                    if (NIN > 2) x2 = p.cls[2] == 3 ? t2[lc][lr] : two_one<T2>(p, 2, c, row, col, T2());
                    out[row * inner + col] = apply(x0, x1, x2, p.b.value);
                }
            }
        }
    }
}

/* Adds index k of dim d to every operand's offset. */
__device__ __forceinline__ void s_add(const EwStrided& p, i64 (&o)[4], i64 k, int d) {
    o[0] += k * p.st[0][d];
    if (NIN > 0) o[1] += k * p.st[1][d];
    if (NIN > 1) o[2] += k * p.st[2][d];
    if (NIN > 2) o[3] += k * p.st[3][d];
}
/* Adds every operand's offset of item `rem` by a hardware division per dim in the type U. */
template <typename U> __device__ __forceinline__ void s_divide(const EwStrided& p, U rem, i64 (&o)[4]) {
#pragma unroll 1
    for (int d = 0; d < p.ndim; ++d) {
        const U sz = (U)p.shape[d];
        const U q = rem / sz;
        const i64 k = (i64)(rem - q * sz);
        rem = q;
        s_add(p, o, k, d);
    }
}
/* Every operand's offset of item i (an element, or in the vector lane a vector): one
   multiply-shift division per dim but the last (whose index is the last quotient) when `div`
   is set, else a hardware division per dim, in 32 bits where the count fits. */
__device__ __forceinline__ void s_offsets(const EwStrided& p, u64 count, u64 i, i64 (&o)[4]) {
    o[0] = o[1] = o[2] = o[3] = 0;
    if (p.div) {
        u32 rem = (u32)i;
        const int last = p.ndim - 1;
#pragma unroll 1
        for (int d = 0; d < last; ++d) {
            const u32 q = (u32)(((u64)__umulhi(rem, p.magic[d]) + rem) >> p.shift[d]);
            const i64 k = (i64)(rem - q * (u32)p.shape[d]);
            rem = q;
            s_add(p, o, k, d);
        }
        s_add(p, o, (i64)rem, last);
    } else if (count <= 0xffffffffull) {
        s_divide<u32>(p, (u32)i, o);
    } else {
        s_divide<u64>(p, i, o);
    }
}
/* VEC consecutive elements of input K along dim 0 from offset o: one vector load where the
   input is dense along it (stride VEC in vector units; the host checked the alignment), its
   one element where it is constant along it (or the number in `value`), else gathered. */
template <typename T, int K>
__device__ __forceinline__ Pack<T, VEC> s_vec(const EwStrided& p, const T* base, i64 o, T s) {
    Pack<T, VEC> v;
    if (K >= NIN || !base) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v.v[j] = s;
        return v;
    }
    const i64 s0 = p.st[K + 1][0];
    if (s0 == VEC) return ldv<T, VEC>(base + o);
    if (s0 == 0) {
        const T x = base[o];
#pragma unroll
        for (int j = 0; j < VEC; ++j) v.v[j] = x;
        return v;
    }
    const i64 e = s0 / VEC;
#pragma unroll
    for (int j = 0; j < VEC; ++j) v.v[j] = base[o + j * e];
    return v;
}
/* The vector lane: a thread per VEC consecutive output elements of dim 0 (dense in the
   output), the index arithmetic once per vector. */
__device__ __forceinline__ void ew_s_vec(const EwStrided& p) {
    const u64 nv = p.b.n / VEC;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 step = (u64)gridDim.x * blockDim.x;
    const T1 sb = (NIN > 1 && !p.b.in1) ? imm<T1>(p.b.value) : T1();
    for (u64 i = tid; i < nv; i += step) {
        i64 o[4];
        s_offsets(p, nv, i, o);
        const Pack<T0, VEC> x0 = s_vec<T0, 0>(p, (const T0*)p.b.in0, o[1], T0());
        const Pack<T1, VEC> x1 = s_vec<T1, 1>(p, (const T1*)p.b.in1, o[2], sb);
        const Pack<T2, VEC> x2 = s_vec<T2, 2>(p, (const T2*)p.b.in2, o[3], T2());
        const Pack<TO, VEC> r = apply_pack<VEC>(x0, x1, x2, p.b.value);
        stv<TO, VEC>((TO*)p.b.out + o[0], r);
    }
}

extern "C" __global__ void __launch_bounds__(256) ew_s(const __grid_constant__ EwStrided p) {
    cs_enter();
    if (VEC > 1 && p.b.vec) {
        ew_s_vec(p);
        return;
    }
    const u64 n = p.b.n;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 i = tid; i < n; i += step) {
        i64 o[4];
        s_offsets(p, n, i, o);
        const T0 x0 = NIN > 0 ? ((const T0*)p.b.in0)[o[1]] : T0();
        const T1 x1 = NIN > 1 ? (p.b.in1 ? ((const T1*)p.b.in1)[o[2]] : imm<T1>(p.b.value)) : T1();
        const T2 x2 = NIN > 2 ? ((const T2*)p.b.in2)[o[3]] : T2();
        ((TO*)p.b.out)[o[0]] = apply(x0, x1, x2, p.b.value);
    }
}
