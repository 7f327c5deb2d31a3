// Grouped GEMMs over expert row groups (docs/DESIGN.md §2-3), tensor cores through mma.sync
// m16n8k16 (bf16/fp16 in, fp32 accumulate), ldmatrix, and a cp.async multi-stage shared-memory
// pipeline with XOR-swizzled tiles. Runs on sm_80 and later (sm_90a included); a Hopper
// wgmma/TMA variant is a separate template that the dispatcher can pick instead.
//
//   same_nk: C[rows of e] (+)= A[rows of e] · B_eᵀ  (B [E,N,K], B_TRANSPOSED)
//            C[rows of e] (+)= A[rows of e] · B_e   (B [E,K,N])
//   same_mn: C_e (+)= A[rows of e]ᵀ · B[rows of e]  (A [S,M], B [S,N], C [E,M,N])
//
// Persistent grid: each CTA walks linear tile ids blockIdx.x, +gridDim.x, ... The tile count
// comes from the device offsets (the scheduler of group_gemm_schedule.cuh), capped by the host
// bound ceil(S/BM) + E computed from S, so the grid needs no device->host sync and every row is
// covered exactly once. No split-K: each output element is reduced by one thread in a fixed
// order, so results are bitwise reproducible.
#pragma once

#include "moejit_common.cuh"
#include "kernel_args.h"
#include "group_gemm_schedule.cuh"
#include "expert_scan.cuh"

namespace moejit {
namespace gg {

// ---------------------------------------------------------------- PTX wrappers

__device__ __forceinline__ unsigned smem_addr(const void *p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// 16-byte async copy global -> shared; with pred false it writes 16 zero bytes and reads
// nothing (src-size 0): ragged M/N/K edges are zero-filled without branches, and the address of
// a predicated-off chunk is never dereferenced.
__device__ __forceinline__ void cp_async16(unsigned dst, const void *src, bool pred) {
    int bytes = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

template <class T> struct Mma;
template <> struct Mma<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4],
                                               unsigned b0, unsigned b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};
template <> struct Mma<__half> {
    static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4],
                                               unsigned b0, unsigned b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

// ---------------------------------------------------------------- shared-memory tiles

// A tile of ROWS rows x CPR 16-byte chunks. Chunks are XOR-swizzled so that the 8 rows an
// ldmatrix phase reads (same logical chunk) and the rows a cp.async warp writes fall into
// distinct banks: with >= 8 chunks per row (>= 128 B) the chunk is XORed with row % 8; with 4
// chunks (64 B) two rows share a 128-byte line, so the XOR uses (row / 2) % 4.
template <int CPR> __device__ __forceinline__ int swizzle(int row, int chunk) {
    if constexpr (CPR >= 8)
        return chunk ^ (row & 7);
    else if constexpr (CPR == 4)
        return chunk ^ ((row >> 1) & 3);
    else
        return chunk ^ ((row >> 2) & 1);
}
template <int CPR> __device__ __forceinline__ unsigned tile_offset(int row, int chunk) {
    return static_cast<unsigned>((row * CPR + swizzle<CPR>(row, chunk)) * 16);
}

// Per-thread copy state of one operand tile, set up once per output tile so that each k-step
// only adds a constant offset and tests one predicate per 16-byte chunk. THREADS is a multiple
// of CPR, so every chunk a thread copies sits in the same column: rows step by THREADS / CPR,
// which keeps the swizzle (row % 8) and makes the shared-memory offset step THREADS * 16 bytes.
// Out-of-range chunks are zero-filled; their (out-of-tensor) addresses are never read.
//
// K-major tile (rows m or n, contiguous k): ROWS x BK, global row stride LD, K extent KDIM.
// row_limit = valid rows of the tile; k validity is checked per step against KDIM.
template <class T, int ROWS, int CPR, int THREADS, long long LD, int KDIM> struct KMajorLoader {
    static constexpr int ITERS = ROWS * CPR / THREADS;
    static constexpr int ROW_STEP = THREADS / CPR;
    static_assert(THREADS % CPR == 0 && ROWS * CPR % THREADS == 0 && ITERS <= 32,
                  "tile chunks must divide evenly among threads");
    const T *ptr;
    unsigned smem_off;
    unsigned row_ok;  // bit i: row r + i * ROW_STEP exists
    int k_left;       // k extent left from this thread's chunk
    __device__ __forceinline__ KMajorLoader(const T *origin, int row_limit, int, int tid) {
        const int r = tid / CPR, c = tid % CPR;
        k_left = KDIM - c * 8;
        ptr = origin + r * LD + c * 8;
        smem_off = tile_offset<CPR>(r, c);
        row_ok = 0;
#pragma unroll
        for (int i = 0; i < ITERS; ++i) row_ok |= (r + i * ROW_STEP < row_limit ? 1u : 0u) << i;
    }
    __device__ __forceinline__ void load(unsigned stage, int k0) const {
        const bool k_ok = k0 < k_left;
#pragma unroll
        for (int i = 0; i < ITERS; ++i) {
            const bool p = k_ok && ((row_ok >> i) & 1u);
            cp_async16(stage + smem_off + i * THREADS * 16, ptr + k0 + i * ROW_STEP * LD, p);
        }
    }
};

// MN-major tile (rows k, contiguous m or n): ROWS = BK rows x CPR chunks, row stride LD.
// row_limit = valid k rows from the origin; chunk_limit = valid chunks of the tile's columns.
template <class T, int ROWS, int CPR, int THREADS, long long LD> struct MnMajorLoader {
    static constexpr int ITERS = ROWS * CPR / THREADS;
    static constexpr int ROW_STEP = THREADS / CPR;
    static_assert(THREADS % CPR == 0 && ROWS * CPR % THREADS == 0,
                  "tile chunks must divide evenly among threads");
    const T *ptr;
    unsigned smem_off;
    int rows_left;  // rows of this thread's column that exist (<= 0 when the column does not)
    __device__ __forceinline__ MnMajorLoader(const T *origin, int row_limit, int chunk_limit,
                                             int tid) {
        const int row = tid / CPR, c = tid % CPR;
        ptr = origin + row * LD + c * 8;
        smem_off = tile_offset<CPR>(row, c);
        rows_left = c < chunk_limit ? row_limit - row : 0;
    }
    __device__ __forceinline__ void load(unsigned stage, int k0) const {
#pragma unroll
        for (int i = 0; i < ITERS; ++i) {
            const bool p = k0 + i * ROW_STEP < rows_left;
            cp_async16(stage + smem_off + i * THREADS * 16, ptr + (k0 + i * ROW_STEP) * LD, p);
        }
    }
};

template <bool C, class A, class B> struct Select { using type = A; };
template <class A, class B> struct Select<false, A, B> { using type = B; };

// ---------------------------------------------------------------- configuration

template <class T_, class CT_, int BM_, int BN_, int BK_, int STAGES_, int WARPS_M_,
          int WARPS_N_, int GROUP_M_>
struct Config {
    using T = T_;
    using CT = CT_;
    static constexpr int BM = BM_, BN = BN_, BK = BK_, STAGES = STAGES_;
    static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, GROUP_M = GROUP_M_;
    static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr int WM = BM / WARPS_M;  // warp tile
    static constexpr int WN = BN / WARPS_N;
    static constexpr int MT = WM / 16;  // m16 fragments per warp
    static constexpr int NT = WN / 8;   // n8 fragments per warp
    static constexpr int A_BYTES = BM * BK * 2;
    static constexpr int B_BYTES = BN * BK * 2;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static_assert(sizeof(T) == 2, "operands are 16-bit");
    static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be a multiple of 16x16");
    static_assert(BK % 16 == 0 && BK >= 16, "BK must be a multiple of 16");
    static_assert(STAGES >= 2, "at least double buffering");
};

// ---------------------------------------------------------------- the main loop

// This lane's ldmatrix.x4 address offsets (bytes) into one operand tile of CPR chunks per row,
// for A and B alike (they differ only in which lane bit picks the 8-row half along M or N,
// mn_half, and which the 8-wide half along k, k_half). K-major ([rows][BK]): one per k16 step,
// from the lane's row warp0 + l8 + 8 mn_half. MN-major ([BK][rows], read with .trans: k-rows
// l8 + 8 k_half): one per 16 rows of M or N from warp0, the other index adding a stride.
template <int CPR, bool KMAJOR, int COUNT>
__device__ __forceinline__ void ldmatrix_offsets(unsigned (&off)[COUNT], int warp0, int l8, int mn_half, int k_half) {
    if constexpr (KMAJOR) {
        int row = warp0 + l8 + mn_half * 8;
#pragma unroll
        for (int kk = 0; kk < COUNT; ++kk) off[kk] = tile_offset<CPR>(row, kk * 2 + k_half);
    } else {
        int krow = l8 + k_half * 8;
#pragma unroll
        for (int i = 0; i < COUNT; ++i) off[i] = tile_offset<CPR>(krow, (warp0 + i * 16) / 8 + mn_half);
    }
}

// Operand tiles live K-major ([rows][BK], read with ldmatrix) or MN-major ([BK][rows], read
// with ldmatrix.trans, which yields the same fragments).
template <class Cfg, bool A_KMAJOR, bool B_KMAJOR> struct Mainloop {
    using T = typename Cfg::T;
    static constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK;
    static constexpr int MT = Cfg::MT, NT = Cfg::NT, KS = BK / 16;
    static constexpr int A_CPR = A_KMAJOR ? BK / 8 : BM / 8;
    static constexpr int B_CPR = B_KMAJOR ? BK / 8 : BN / 8;
    static constexpr int A_ROWS = A_KMAJOR ? BM : BK;
    static constexpr int B_ROWS = B_KMAJOR ? BN : BK;
    // ldmatrix address offsets (bytes) of this lane: A indexed by kk (K-major) or mi (MN-major),
    // B by kk or nj; the other index adds a compile-time stride.
    static constexpr int A_OFFS = A_KMAJOR ? KS : MT;
    static constexpr int B_OFFS = B_KMAJOR ? KS : NT / 2;
    unsigned a_off[A_OFFS];
    unsigned b_off[B_OFFS];

    __device__ __forceinline__ Mainloop(int warp_m0, int warp_n0, int lane) {
        int l8 = lane & 7, h1 = (lane >> 3) & 1, h2 = lane >> 4;
        // A: matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15): lane bit 3 picks m, 4 picks k.
        ldmatrix_offsets<A_CPR, A_KMAJOR>(a_off, warp_m0, l8, h1, h2);
        // B: matrices (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15): lane bit 4 picks n, 3 picks k.
        ldmatrix_offsets<B_CPR, B_KMAJOR>(b_off, warp_n0, l8, h2, h1);
    }

    // One BK slice held in shared memory: BK/16 steps of MT x NT mma.
    __device__ __forceinline__ void compute(unsigned a_tile, unsigned b_tile,
                                            float (&acc)[MT][NT][4]) const {
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
            unsigned af[MT][4];
            unsigned bf[NT / 2][4];
#pragma unroll
            for (int mi = 0; mi < MT; ++mi) {
                if constexpr (A_KMAJOR)  // +16 rows per fragment (offsets keep the swizzle)
                    ldmatrix_x4(a_tile + a_off[kk] + mi * 16 * A_CPR * 16, af[mi]);
                else  // +16 k-rows per step
                    ldmatrix_x4_trans(a_tile + a_off[mi] + kk * 16 * A_CPR * 16, af[mi]);
            }
#pragma unroll
            for (int nj = 0; nj < NT / 2; ++nj) {
                if constexpr (B_KMAJOR)
                    ldmatrix_x4(b_tile + b_off[kk] + nj * 16 * B_CPR * 16, bf[nj]);
                else
                    ldmatrix_x4_trans(b_tile + b_off[nj] + kk * 16 * B_CPR * 16, bf[nj]);
            }
#pragma unroll
            for (int mi = 0; mi < MT; ++mi)
#pragma unroll
                for (int ni = 0; ni < NT; ++ni)
                    Mma<T>::run(acc[mi][ni], af[mi], bf[ni / 2][(ni & 1) * 2],
                                bf[ni / 2][(ni & 1) * 2 + 1]);
        }
    }
};

// Runs the multi-stage pipeline over k_tiles BK slices. load(stage_smem_a, stage_smem_b, kt)
// issues the cp.async copies of slice kt. Leaves no copy in flight.
template <class Cfg, class ML, class Load>
__device__ __forceinline__ void pipeline(const ML &ml, unsigned smem, int k_tiles,
                                         float (&acc)[Cfg::MT][Cfg::NT][4], const Load &load) {
    constexpr int S = Cfg::STAGES;
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
        if (s < k_tiles) load(smem + s * Cfg::STAGE_BYTES, smem + s * Cfg::STAGE_BYTES + Cfg::A_BYTES, s);
        cp_async_commit();  // empty groups keep the wait_group arithmetic uniform
    }
    // Stage addresses advance round-robin (no modulo in the loop).
    const unsigned end = smem + S * Cfg::STAGE_BYTES;
    unsigned rd = smem, wr = smem + (S - 1) * Cfg::STAGE_BYTES;
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<S - 2>();
        // Slice kt is visible to all threads, and every warp is done with slice kt-1, whose
        // stage the copy below overwrites.
        __syncthreads();
        if (kt + S - 1 < k_tiles) load(wr, wr + Cfg::A_BYTES, kt + S - 1);
        cp_async_commit();
        ml.compute(rd, rd + Cfg::A_BYTES, acc);
        rd = rd + Cfg::STAGE_BYTES == end ? smem : rd + Cfg::STAGE_BYTES;
        wr = wr + Cfg::STAGE_BYTES == end ? smem : wr + Cfg::STAGE_BYTES;
    }
    cp_async_wait<0>();
}

template <class Cfg>
__device__ __forceinline__ void zero(float (&acc)[Cfg::MT][Cfg::NT][4]) {
#pragma unroll
    for (int mi = 0; mi < Cfg::MT; ++mi)
#pragma unroll
        for (int ni = 0; ni < Cfg::NT; ++ni)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[mi][ni][j] = 0.0f;
}

// Writes the warp's accumulators to C (row stride ldc); rows >= rows_valid and columns >=
// cols_valid (both tile-local) are skipped. ACCUMULATE reads C first: C = C + acc.
template <class Cfg, bool ACCUMULATE>
__device__ __forceinline__ void store_tile(const float (&acc)[Cfg::MT][Cfg::NT][4],
                                           typename Cfg::CT *c, long long ldc, int rows_valid,
                                           int cols_valid, int warp_m0, int warp_n0, int lane) {
#pragma unroll
    for (int mi = 0; mi < Cfg::MT; ++mi) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            int r = warp_m0 + mi * 16 + (lane >> 2) + half * 8;
            if (r >= rows_valid) continue;
            typename Cfg::CT *row = c + r * ldc;
#pragma unroll
            for (int ni = 0; ni < Cfg::NT; ++ni) {
                int col = warp_n0 + ni * 8 + (lane & 3) * 2;
                if (col >= cols_valid) continue;
                float v0 = acc[mi][ni][half * 2], v1 = acc[mi][ni][half * 2 + 1];
                if constexpr (ACCUMULATE) {
                    float2 old = load2(row + col);
                    v0 = old.x + v0;
                    v1 = old.y + v1;
                }
                store2(row + col, v0, v1);
            }
        }
    }
}

// ---------------------------------------------------------------- same_nk

// C [rows, N]; A [rows, K]; B [E, N, K] (B_TRANSPOSED) or [E, K, N].
// m_tile_bound: the host's bound ceil(rows/BM) + min(E, rows) on the M-tile count.
template <class Cfg, int N, int K, bool B_TRANSPOSED, bool ACCUMULATE>
__device__ __forceinline__ void group_gemm_nk(const typename Cfg::T *__restrict__ a,
                                              const typename Cfg::T *__restrict__ b,
                                              typename Cfg::CT *__restrict__ c,
                                              const int *__restrict__ offsets, int rows,
                                              int num_experts, int m_tile_bound) {
    using T = typename Cfg::T;
    constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, THREADS = Cfg::THREADS;
    constexpr int N_TILES = (N + BN - 1) / BN;
    constexpr int K_TILES = (K + BK - 1) / BK;
    static_assert(N % 8 == 0 && K % 8 == 0, "N and K must be multiples of 8");
    using ML = Mainloop<Cfg, true, B_TRANSPOSED>;
    using LoaderA = KMajorLoader<T, BM, BK / 8, THREADS, K, K>;
    using LoaderB = typename Select<B_TRANSPOSED, KMajorLoader<T, BN, BK / 8, THREADS, K, K>,
                                    MnMajorLoader<T, BK, BN / 8, THREADS, N>>::type;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ int warp_sums[THREADS / 32];
    // Cumulative M-tile counts per expert (E+1 ints) after the pipeline stages.
    int *cum = reinterpret_cast<int *>(smem_raw + Cfg::STAGES * Cfg::STAGE_BYTES);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    // The experts' M-tiles (expert_scan.cuh), at most the host's bound.
    const int m_tiles = scan_nk_m_tiles<THREADS>(offsets, rows, num_experts, BM, m_tile_bound, warp_sums, cum);
    const int total_tiles = m_tiles * N_TILES;

    const int warp_m0 = (warp / Cfg::WARPS_N) * Cfg::WM;
    const int warp_n0 = (warp % Cfg::WARPS_N) * Cfg::WN;
    const ML ml(warp_m0, warp_n0, lane);
    const unsigned smem = smem_addr(smem_raw);

    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
        const sched::NkTilePlace tp = sched::nk_tile_place(cum, offsets, num_experts, rows, N_TILES, Cfg::GROUP_M, BM, BN, t);
        const int row0 = tp.row0, n0 = tp.n0;
        const int rows_valid = tp.row_end - row0;  // may exceed BM: the tile takes BM
        const T *b_e = b + static_cast<long long>(tp.expert) * N * K;

        // A rows of the tile; B: [N,K] rows n (K-major) or [K,N] rows k (MN-major).
        const LoaderA la(a + static_cast<long long>(row0) * K, rows_valid, 0, tid);
        const LoaderB lb(B_TRANSPOSED ? b_e + static_cast<long long>(n0) * K : b_e + n0,
                         B_TRANSPOSED ? N - n0 : K, (N - n0) / 8, tid);

        float acc[Cfg::MT][Cfg::NT][4];
        zero<Cfg>(acc);
        __syncthreads();  // the previous tile's last stage may still be read by other warps
        pipeline<Cfg>(ml, smem, K_TILES, acc, [&](unsigned sa, unsigned sb, int kt) {
            la.load(sa, kt * BK);
            lb.load(sb, kt * BK);
        });
        store_tile<Cfg, ACCUMULATE>(acc, c + static_cast<long long>(row0) * N + n0, N,
                                    rows_valid, N - n0, warp_m0, warp_n0, lane);
    }
}

// ---------------------------------------------------------------- same_mn

// C [E, M, N] with C_e = A_eᵀ · B_e, the reduction running over the expert's rows in order.
// A [rows, M], B [rows, N]. Every expert gets all its tiles: an empty one is written as exactly
// 0, or left untouched when ACCUMULATE.
template <class Cfg, int M, int N, bool ACCUMULATE>
__device__ __forceinline__ void group_gemm_mn(const typename Cfg::T *__restrict__ a,
                                              const typename Cfg::T *__restrict__ b,
                                              typename Cfg::CT *__restrict__ c,
                                              const int *__restrict__ offsets, int rows,
                                              int num_experts) {
    using T = typename Cfg::T;
    constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, THREADS = Cfg::THREADS;
    constexpr int M_TILES = (M + BM - 1) / BM;
    constexpr int N_TILES = (N + BN - 1) / BN;
    static_assert(M % 8 == 0 && N % 8 == 0, "M and N must be multiples of 8");
    using ML = Mainloop<Cfg, false, false>;
    using LoaderA = MnMajorLoader<T, BK, BM / 8, THREADS, M>;
    using LoaderB = MnMajorLoader<T, BK, BN / 8, THREADS, N>;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m0 = (warp / Cfg::WARPS_N) * Cfg::WM;
    const int warp_n0 = (warp % Cfg::WARPS_N) * Cfg::WN;
    const ML ml(warp_m0, warp_n0, lane);
    const unsigned smem = smem_addr(smem_raw);
    const int total_tiles = num_experts * M_TILES * N_TILES;

    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
        sched::TileCoord tc = sched::mn_tile(M_TILES, N_TILES, Cfg::GROUP_M, t);
        sched::RowRange rr = sched::expert_rows(offsets, tc.expert, rows);
        if (ACCUMULATE && rr.end == rr.begin) continue;  // += 0: leave C untouched
        const int m0 = tc.m_block * BM, n0 = tc.n_block * BN;
        const int k_tiles = (rr.end - rr.begin + BK - 1) / BK;

        const int k_rows = rr.end - rr.begin;
        const LoaderA la(a + static_cast<long long>(rr.begin) * M + m0, k_rows, (M - m0) / 8, tid);
        const LoaderB lb(b + static_cast<long long>(rr.begin) * N + n0, k_rows, (N - n0) / 8, tid);

        float acc[Cfg::MT][Cfg::NT][4];
        zero<Cfg>(acc);
        __syncthreads();
        pipeline<Cfg>(ml, smem, k_tiles, acc, [&](unsigned sa, unsigned sb, int kt) {
            la.load(sa, kt * BK);
            lb.load(sb, kt * BK);
        });
        typename Cfg::CT *c_tile =
            c + (static_cast<long long>(tc.expert) * M + m0) * N + n0;
        store_tile<Cfg, ACCUMULATE>(acc, c_tile, N, M - m0, N - n0, warp_m0, warp_n0, lane);
    }
}

// ---------------------------------------------------------------- kernels
// Each takes its one argument struct (kernel_args.h); the JIT renders an explicit instantiation.

template <int THREADS, int MIN_BLOCKS, class Cfg, int N, int K, bool B_TRANSPOSED, bool ACCUMULATE>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS) group_gemm_nk_kernel(const __grid_constant__ kargs::GemmNkArgs args) {
    group_gemm_nk<Cfg, N, K, B_TRANSPOSED, ACCUMULATE>(
        static_cast<const typename Cfg::T *>(args.a), static_cast<const typename Cfg::T *>(args.b),
        static_cast<typename Cfg::CT *>(args.c), args.offsets, args.rows, args.num_experts, args.m_tile_bound);
}

template <int THREADS, int MIN_BLOCKS, class Cfg, int M, int N, bool ACCUMULATE>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS) group_gemm_mn_kernel(const __grid_constant__ kargs::GemmMnArgs args) {
    group_gemm_mn<Cfg, M, N, ACCUMULATE>(static_cast<const typename Cfg::T *>(args.a),
                                         static_cast<const typename Cfg::T *>(args.b),
                                         static_cast<typename Cfg::CT *>(args.c), args.offsets, args.rows,
                                         args.num_experts);
}

}  // namespace gg
}  // namespace moejit
