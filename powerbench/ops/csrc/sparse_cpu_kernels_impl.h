// Neuron-aware sparse kernels, the dense kernel and the read probe, written once against the
// vector helpers V / vload / vfma / ... of one ISA path (simd_avx512.h, simd_avx2.h,
// simd_portable.h). Included inside that path's namespace by cpu_isa_<path>.cpp: every
// function here is compiled once per path. See sparse_cpu_kernels.h for the contracts.
//
// Memory streaming (all paths): each thread streams kRowGroup rows at once (independent
// cache-line streams, x loaded once per group), software-prefetching each stream
// kPrefetchBytes ahead. Work is claimed from the pool in chunks (a range of positions in
// the id list), so both cores keep streaming while either gets CPU time. Inside a chunk the
// positions are dealt to the kRowGroup slots as contiguous runs of about kRunBytes
// (SlotRuns): slot q walks its own run, so where the ids are consecutive (every dense
// matrix, most active rows at low sparsity) a slot reads one long contiguous stream.
// Dealing them round-robin instead (rows j..j+3, then j+4..j+7) ends every slot's stream
// after one row, and a stream restarts slowly: with round-robin groups the same kernel read
// 256 MB of fp32 (2 threads) at 34-37 GB/s over 16 KiB rows but 38-42 GB/s over 64-256 KiB
// rows, so the sparse axpy (16 KiB rows of W_down^T) lost to the dense product over
// W_down's 64 KiB rows at any sparsity below ~10%. A row gather has no next row in memory
// for the hardware prefetcher to follow (nor does a 4 KiB page boundary), so the prefetch
// address runs past the end of a row into the row the slot reads next at the matching
// offset (RowStreams below): the gather becomes one continuous stream per slot.

using simd::bf16;
using simd::f16;
using simd::store;
using simd::to_f32;

// Work below this many multiply-adds runs on one thread (a parallel region costs microseconds).
constexpr int64_t kParallelMin = int64_t(1) << 15;
// Columns per chunk when a weight chunk is reused for several tokens (axpy, batch > 1).
constexpr int64_t kChunk = 256;
// Bytes each slot reads in one run of a dynamically claimed chunk (a chunk is kRowGroup
// runs): knob run_kb (cpu_knobs.h), default 64 KiB. Long enough that a run is one long
// stream (round-robin slots, 2026-11-25: 16 KiB runs read 37 GB/s, 64 KiB+ runs 41-42 GB/s),
// short enough that a thread the OS preempts (the machine is shared) does not hold back the
// others. Which is faster depends on the load: measured side by side in one process
// (bench-operators task.variants, 4096x16384 b1), 1 MiB runs (the chunk size then capped at
// chunks_per_thread per thread) beat 64 KiB at load 2.4-6.6 (2026-11-26 06:14-06:20 UTC, fp16
// 90% cells 6.6-6.9x -> 7.6-8.2x dense) but lost in all 16 fp16/bf16 cells at load 1.6
// (07:13 UTC: row fp16 90% 8.03x with 64 KiB vs 6.92x, bf16 ffn_gated 8.98x vs 7.87x); the
// targets are for a quiet machine, so 64 KiB stays.
// ... and at least knob chunks_per_thread (default 4) chunks per thread, so small matrices
// still balance.
// Software prefetch distance per slot: knob prefetch_bytes (default 2 KiB). A scattered
// gather restarts a stream at every row, and only the software prefetch has the new row in
// flight before its first load: 2 KiB (8 slots x 2 KiB in flight on 2 threads) measured
// better than 1 KiB on 8 KiB fp16 rows at 50-90% sparsity (row 1.72-1.81x vs 1.65x at 50%,
// 7.98-8.89x vs 7.32-7.65x at 90%) and equal within noise elsewhere; 3 KiB no better. In
// the same-process A/B (2026-11-26 06:14, fp16 b1) 4 and 8 KiB were slower in every cell
// (row 0%: 0.91x / 0.85x vs 1.02x dense; 50%: 1.56x / 1.55x vs 1.61x) and 1 KiB mixed.
constexpr int64_t kShortRowBytes = 4096;  // shorter rows prefetch the next rows of the slot

// Row slots per thread for a batch-1 gather of scattered rows: twice kRowGroup where the
// registers hold it (AVX-512: 8 rows x 2 accumulators; AVX2 has 16 registers, keeps 4).
// The read-only gather probe (gather_probe_impl.h) read scattered rows faster with 8 slots
// than with 4 in a fixed call order (2026-11-26 12:06 UTC: fp16 row 90% 64 vs 56 GB/s), but
// with each benchmark round in a random order (12:34 UTC, load 0.9-1.1) 8 slots showed no
// gain in the operators (fp16/fp32 row, axpy, ffn_gated at 90%: within +-10%, either way).
// With the split prefetch loop (RowStreams::loop) 8 slots do gain: same-process A/Bs,
// 4096x16384 b1, 2026-11-26 20:22-20:24 UTC (load 1.1-1.3, read probe 30-37 GB/s), six runs
// of 4 slots vs 8 where fewer than 60% of the ids are adjacent: 8 slots faster in 83 of the
// 96 (run, cell) pairs of fp16/bf16/fp32 x 4 ops x 50%/90% sparsity (fp16 50%: row
// 1.82-1.99x -> 1.89-2.21x dense, ffn_relu 1.77-1.99x -> 1.97-2.10x; bf16 90% axpy 7.5-8.6x
// -> 8.8-9.4x), fp32 axpy at 50% even (1.90-2.00x vs 1.90-1.97x). So knob wide_adjacent_pct
// was 60: 8 slots from about 40% sparsity on (at 10% sparsity about 90% of the ids are
// adjacent: 4 slots, where 8 were mixed in that spell, fp32 axpy 1.09x -> 1.07x). It is
// now 101, 8 slots for every batch-1 gather and for the dense kernel too (see
// gather_slots for the A/Bs).
constexpr int kMaxSlots = kW >= 16 ? 2 * kRowGroup : kRowGroup;

// Row slots of a batch-1 gather from how many ids are their predecessor + 1: at least knob
// one_slot_adjacent_pct percent (0: off, the default; 95 was): 1 slot, one stream per
// thread prefetched kRowGroup times as far (the gather probe's merged runs read 0%
// sparsity at 52-53 GB/s where 4 slots read 46-50); fewer than knob wide_adjacent_pct
// percent (default 101: always, see below; 60 was) kMaxSlots; else kRowGroup. O(n) when
// a rule needs the count. The dense kernel (no ids) is a gather of every row, all
// adjacent: the same rule gives it its slots, so a knob setting changes dense and sparse
// alike. 8 slots everywhere (wide_adjacent_pct 101) against 60, 2026-11-27 00:03-00:45 UTC:
//  - 14 same-process bench-operators runs of the batch-1 target grid (fp32/fp16, 4 ops,
//    0/10/50/90%): 444 of 448 speedup targets met against 435 (60's misses: mostly fp32
//    axpy at 0-10% where the dense kernel read 44-56 GB/s: 0.84-0.91x at 0%), GB/s share
//    >= 95% in 326 of 336 cells against 318;
//  - our dense kernel itself, the operator bench's timer, huge pages, three runs: fp16
//    +3-7%, bf16 +4-21%, fp32 -3% to +3%;
//  - whole-model decode in the same rounds (bench-decode task.variants, every kernel
//    call under the setting): OPT-6.7B shape (8 layers, 2 threads) dense 9.07 -> 10.23
//    tok/s, sparse 23.2 -> 27.0; SmolLM2-135M dense 21.7 -> 21.4, sparse 34.6 -> 34.7
//    (within the rounds' spread).
// Same-process A/Bs (bench-operators task.variants, 4096x16384 b1) of one slot vs 4 at 0%
// sparsity, with the loop of the time (a per-line prefetch select): 12:13 UTC (load 1.5)
// fp16 row 0.85x -> 0.93x dense, ffn_gated 0.93x -> 1.05x; 12:34 UTC (random round order,
// load 0.9-1.1) fp16 row 0.88x -> 0.94-0.96x, ffn_gated 0.90x -> 1.07-1.08x, axpy 1.03x ->
// 1.00-1.11x, fp32 0.96-0.99x -> 0.99-1.02x. One slot from 85% adjacency on (10% sparsity
// too) lost at 10% (axpy fp16 1.55x -> 1.37x), so it was 95. With the split prefetch loop
// (RowStreams::loop) the 4 slots win instead: six runs at 0%, 2026-11-26 20:48-21:08 UTC
// (load 1.3-1.5, read probe 31-37 GB/s), 4 slots faster in 48 of 64 (run, cell) pairs,
// fp32 in 22 of 24 (row 0.73-0.95x -> 0.95-1.01x dense, ffn_relu 0.83-0.94x -> 0.97-1.08x),
// fp16 mixed (axpy 0.74-1.07x vs 0.83-1.04x). At 0% the row kernels then run the dense
// kernel's own schedule, so their ratio to it no longer moves with the machine's
// bandwidth spell (one slot gave fp32 row 0.97x at 17:55 UTC, 45-50 GB/s, and 0.91x at
// 20:46 UTC, 35 GB/s). So knob one_slot_adjacent_pct defaults to 0.
inline int gather_slots(const int64_t* idx, int64_t n, int64_t B) {
  const int64_t wide = knob(kKnobWideAdjacentPct), one = knob(kKnobOneSlotAdjacentPct);
  if (B != 1 || n < 2 || (wide == 0 && one == 0)) return kRowGroup;
  if (one == 0 && wide > 100) return kMaxSlots;  // every gather (the default)
  int64_t adjacent = n - 1;  // no ids (the dense kernel: rows 0..n-1): every row adjacent
  if (idx != nullptr) {
    adjacent = 0;
    for (int64_t j = 1; j < n; ++j) adjacent += idx[j] == idx[j - 1] + 1;
  }
  if (one > 0 && adjacent * 100 >= one * (n - 1)) return 1;
  if (kMaxSlots > kRowGroup && adjacent * 100 < wide * (n - 1)) return kMaxSlots;
  return kRowGroup;
}

// Rows per claimed chunk when n rows of row_bytes each are shared by nt threads, read by
// `slots` row slots per thread. Fewer slots than kRowGroup stream a chunk of kRowGroup runs
// all the same (one slot prefetches kRowGroup times as far, so it stands for kRowGroup
// slots): a chunk's first row has nothing prefetched (its predecessor on this thread is
// unknown until the claim), so a one-slot chunk of one run restarted the stream every
// run_kb. Same-process A/B, fp16 row 4096x16384 b1 at 0% sparsity (2026-11-26 14:21 UTC,
// load 3.0): one-slot chunks of 256 KiB instead of 64 KiB, 4704 -> 3903 us.
inline int64_t rows_per_grab(int64_t row_bytes, int64_t n, int nt, int slots = kRowGroup) {
  const int64_t run_bytes = knob(kKnobRunKB) << 10;
  const int64_t run = (run_bytes + row_bytes - 1) / (row_bytes > 0 ? row_bytes : 1);
  int64_t r = (slots < kRowGroup ? kRowGroup : slots) * run;
  const int64_t per = knob(kKnobChunksPerThread) * nt;
  const int64_t balanced = (n + per - 1) / per;
  r = r < balanced ? r : balanced;
  return r < 1 ? 1 : r;
}

// The positions [p0, p1) of one chunk dealt to the `slots` slots (at most kMaxSlots) as
// contiguous runs of `run` positions: slot q takes p0 + q run, p0 + q run + 1, ... (see the
// top of the file).
struct SlotRuns {
  int64_t p0, p1;
  int slots;
  int64_t run;
  SlotRuns(int64_t b, int64_t e, int s) : p0(b), p1(e), slots(s), run((e - b + s - 1) / s) {}
  // the positions of step t < run, one per slot that still has one (always slots 0..c-1)
  int at(int64_t t, int64_t* pos) const {
    int c = 0;
    for (int q = 0; q < slots; ++q) {
      const int64_t p = p0 + q * run + t;
      if (p >= p1) break;
      pos[c++] = p;
    }
    return c;
  }
};

// rows[q] = row ids[pos[q]] of `base` (row pos[q] when ids is null), q < count
template <typename WT>
inline void rows_at(const WT* base, int64_t row_len, const int64_t* ids, const int64_t* pos,
                    int count, const WT** rows) {
  for (int q = 0; q < count; ++q) rows[q] = base + (ids ? ids[pos[q]] : pos[q]) * row_len;
}

// f(pos, count, next, next_count) for every step of the chunk [p0, p1): the positions the
// slots read now and those they read at the next step (next_count 0 at the last step).
template <typename F>
inline void walk_slots(int64_t p0, int64_t p1, int slots, F&& f) {
  const SlotRuns runs(p0, p1, slots);
  int64_t pos[2][kMaxSlots];
  int count = runs.at(0, pos[0]);
  for (int64_t t = 0; t < runs.run; ++t) {
    int64_t* cur = pos[t & 1];
    int64_t* nxt = pos[(t + 1) & 1];
    const int next_count = t + 1 < runs.run ? runs.at(t + 1, nxt) : 0;
    f(static_cast<const int64_t*>(cur), count, static_cast<const int64_t*>(nxt), next_count);
    count = next_count;
  }
}

// f(std::integral_constant<int, count>) for 1 <= count <= N: a compile-time row count.
template <int N, typename F>
inline void with_count(int count, F&& f) {
  if constexpr (N >= 1) {
    if (count == N) {
      f(std::integral_constant<int, N>{});
      return;
    }
    with_count<N - 1>(count, f);
  }
}

// Per-thread scratch that survives across calls (pool threads are persistent); `slot`
// selects one of a few independent buffers.
inline void* thread_scratch(int slot, size_t bytes) {
  struct Buf {
    void* p = nullptr;
    size_t cap = 0;
    ~Buf() { std::free(p); }
  };
  static thread_local Buf bufs[4];
  Buf& b = bufs[slot];
  if (b.cap < bytes) {
    std::free(b.p);
    b.cap = (bytes + 63) / 64 * 64;
    b.p = std::aligned_alloc(64, b.cap);
  }
  return b.p;
}

// The kRowGroup row slots of a thread as continuous streams for the software prefetcher:
// at byte offset `off` of the rows being read, slot q prefetches `cur[q] + off + d`, or,
// past the end of the row, the same distance into `next[q]` (the row that slot reads
// next). Long rows use d = knob prefetch_bytes (at most row_bytes); rows under
// kShortRowBytes use d = row_bytes,
// i.e. the slots' next rows at the same offset. The two bases are precomputed, so a
// prefetch is one compare and a select (a loop with branches here measured 1.5-2x slower
// on 576-wide fp16 rows, one thread: the prefetch code must stay out of the loads' way).
struct RowStreams {
  const char* ahead[kMaxSlots];  // cur[q] + d
  const char* after[kMaxSlots];  // next[q] + d - row_bytes
  int streams = kRowGroup;       // q < streams (at least kRowGroup: short groups repeat a row)
  int64_t switch_off = 0;        // offsets from here on prefetch into the next rows
  int64_t dist = 0;              // d

  template <typename WT>
  RowStreams(const WT* const* rows, int count, const WT* const* next_rows, int next_count,
             int64_t row_len, int slots = kRowGroup) {
    const int64_t row_bytes = row_len * int64_t(sizeof(WT));
    // fewer slots than kRowGroup: each prefetches further (the same bytes in flight)
    const int64_t pf = knob(kKnobPrefetchBytes) * (slots < kRowGroup ? kRowGroup / slots : 1);
    const int64_t d = row_bytes < kShortRowBytes || pf > row_bytes ? row_bytes : pf;
    switch_off = row_bytes - d;
    dist = d;
    streams = count > kRowGroup || slots < kRowGroup ? (count > 0 ? count : 1) : kRowGroup;
    for (int q = 0; q < streams; ++q) {
      const char* cur =
          reinterpret_cast<const char*>(rows[q < count ? q : (count > 1 ? count - 1 : 0)]);
      const char* next = next_count > 0 ? reinterpret_cast<const char*>(
                                              next_rows[q < next_count ? q : next_count - 1 > 0 ? next_count - 1 : 0])
                                        : cur;
      ahead[q] = cur + d;
      after[q] = next + (d - row_bytes);
    }
  }
  // At a chunk's first step (p == p0) with knob head_prefetch on: prefetch the first d bytes
  // of the rows being read, which no earlier step prefetched.
  inline void head(int64_t p, int64_t p0) const {
    if (p != p0 || !knob(kKnobHeadPrefetch)) return;
    for (int64_t o = 0; o < dist; o += 64)
      for (int q = 0; q < streams; ++q) prefetch_l2(ahead[q] - dist + o);
  }
  // prefetch the lines d ahead of bytes [off, off + len) of every slot
  inline void at(int64_t off, int64_t len) const {
    for (int64_t o = off; o < off + len; o += 64) {
      const char* const* base = o < switch_off ? ahead : after;
      for (int q = 0; q < streams; ++q) prefetch_l2(base[q] + o);
    }
  }
  // at() where streams == S is known at compile time (with_streams): the loop over the
  // slots unrolled, its bases in registers. The run-time loop cost about 8 instructions a
  // line beside the one prefetch (objdump of the fp16 one-row loop: 19 instructions per
  // 64 bytes, of them 2 conversions and 2 FMAs).
  template <int S>
  inline void at_n(int64_t off, int64_t len) const {
    for (int64_t o = off; o < off + len; o += 64) {
      const bool in_row = o < switch_off;
      for (int q = 0; q < S; ++q) prefetch_l2((in_row ? ahead[q] : after[q]) + o);
    }
  }
  // body(k) for k = k0, k0 + Step, ... while k + Step <= k_end (elements of EB bytes), each
  // step after the prefetch of its lines in S streams (S == 0: pf.streams, the run-time
  // loop). Knob stream_loop >= 1: the loop is cut where the prefetch leaves the rows
  // (switch_off, rounded up to a step) into a part that prefetches `ahead` and one that
  // prefetches `after`, the bases copied to locals: one prefetch instruction per line and
  // stream, no select. objdump of the fp16 4-row loop (dot_rows<f16, 4>, avx512_bf16):
  // 35 instructions per 4 lines with at_n (a compare and branch on switch_off, a base
  // reloaded from `ahead`/`after` and added per prefetch), 26 now (2 x loads, 8 vcvtph2ps,
  // 8 FMAs, 4 prefetcht1, one spilled loop bound, add, compare, branch). Same-process A/Bs,
  // 4096x16384 b1, stream_loop 1 vs 0 (the dense kernel, the same loop, at 1 in both):
  // 2026-11-26 17:14 UTC (load 2.6-3.0) fp16 50% row 1.82x vs 1.73x dense, ffn_gated 1.82x
  // vs 1.73x; 17:17 UTC (load 1.5) fp32 row 0% 0.99x vs 0.93x, 50% 1.88x vs 1.68x, 90%
  // 8.69x vs 7.76x, fp16 row 50% 1.95x vs 1.88x, ffn_relu / ffn_gated 1.81x vs 1.77x.
  // Returns the first k not done.
  template <int S, int64_t Step, int64_t EB, typename F>
  inline int64_t loop(int64_t k, int64_t k_end, F&& body) const {
    constexpr int64_t kBytes = Step * EB;
    if constexpr (S > 0) {
      if (knob(kKnobStreamLoop) > 0) {
        const int64_t k_sw = (switch_off + EB - 1) / EB;  // first element past the switch
        for (int part = 0; part < 2; ++part) {
          const char* base[S];
          for (int q = 0; q < S; ++q) base[q] = part == 0 ? ahead[q] : after[q];
          const int64_t stop = part == 0 ? (k_sw < k_end ? k_sw : k_end) : k_end;
          int64_t steps = k < stop ? (stop - k + Step - 1) / Step : 0;
          const int64_t room = k + Step <= k_end ? (k_end - k) / Step : 0;
          steps = steps < room ? steps : room;
          for (int64_t i = 0; i < steps; ++i, k += Step) {
            const int64_t o = k * EB;
            for (int64_t l = 0; l < kBytes; l += 64)
              for (int q = 0; q < S; ++q) prefetch_l2(base[q] + o + l);
            body(k);
          }
        }
        return k;
      }
    }
    for (; k + Step <= k_end; k += Step) {
      if constexpr (S > 0) {
        at_n<S>(k * EB, kBytes);
      } else {
        at(k * EB, kBytes);
      }
      body(k);
    }
    return k;
  }
};

// f(std::integral_constant<int, S>) with S = pf.streams when it is R or kRowGroup (always,
// for the batch-1 kernels: see RowStreams), else S = 0 (the run-time loop, RowStreams::at).
template <int R, typename F>
inline void with_streams(const RowStreams& pf, F&& f) {
  if (pf.streams == R) {
    f(std::integral_constant<int, R>{});
  } else if constexpr (R != kRowGroup) {
    if (pf.streams == kRowGroup) {
      f(std::integral_constant<int, kRowGroup>{});
    } else {
      f(std::integral_constant<int, 0>{});
    }
  } else {
    f(std::integral_constant<int, 0>{});
  }
}

// walk_slots over rows `ids` of `base` (row_len elements each; rows 0.. when ids is null):
// f(pos, count, rows, pf) with the slots' rows of this step and their streams, prefetched
// on into the rows the slots read at the next step: the walk of every one-matrix gather.
template <typename WT, typename F>
inline void walk_row_streams(const WT* base, int64_t row_len, const int64_t* ids, int64_t p0,
                             int64_t p1, int slots, F&& f) {
  walk_slots(p0, p1, slots, [&](const int64_t* pos, int count, const int64_t* nxt,
                                int next_count) {
    const WT *rows[kMaxSlots], *next[kMaxSlots];
    rows_at(base, row_len, ids, pos, count, rows);
    rows_at(base, row_len, ids, nxt, next_count, next);
    const RowStreams pf(rows, count, next, next_count, row_len, slots);
    pf.head(pos[0], p0);
    f(pos, count, static_cast<const WT* const*>(rows), pf);
  });
}

// R rows . one token: R concurrent memory streams per thread, A accumulators per row, at
// least 4 in all. Each accumulator is a chain of dependent FMAs (4 cycles each on Zen 4/5),
// so the 2 chains of a single row (the one-slot stream) capped it at 64 bytes of fp16 or
// bf16 per 4 cycles (~42 GB/s per core at 2.6 GHz), not far above what one core streams
// from memory; fp32 moves twice the bytes per vector. (By that arithmetic, not measured
// apart from the prefetch change that came with it; in-cache it made no visible difference.)
template <typename WT, int R>
inline void dot_rows(const WT* const* w, const float* x, int64_t K, float* res,
                     const RowStreams& pf) {
  constexpr int A = R >= 2 ? 2 : 4;
  V a[R][A];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < A; ++i) a[r][i] = vzero();
  int64_t k = 0;
  with_streams<R>(pf, [&](auto streams) {
    constexpr int S = decltype(streams)::value;
    k = pf.loop<S, A * kW, int64_t(sizeof(WT))>(k, K, [&](int64_t kk) {
      V xv[A];
      for (int i = 0; i < A; ++i) xv[i] = vload(x + kk + i * kW);
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < A; ++i) a[r][i] = vfma(vload(w[r] + kk + i * kW), xv[i], a[r][i]);
    });
  });
  for (; k + kW <= K; k += kW) {
    const V x0 = vload(x + k);
    for (int r = 0; r < R; ++r) a[r][0] = vfma(vload(w[r] + k), x0, a[r][0]);
  }
  for (int r = 0; r < R; ++r) {
    V t = a[r][0];
    for (int i = 1; i < A; ++i) t = vadd(t, a[r][i]);
    float s = vhsum(t);
    for (int64_t kk = k; kk < K; ++kk) s += to_f32(w[r][kk]) * x[kk];
    res[r] = s;
  }
}

// R fp32 rows . T tokens over len (a multiple of kW) elements, accumulating into acc: each
// weight vector is loaded once for T tokens and each x vector once for R rows.
template <int R, int T>
inline void tile_rt(const float* const* w, const float* x, int64_t ldx, int64_t len,
                    V* acc /*[R][T]*/) {
  V a[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) a[r][t] = acc[r * T + t];
  for (int64_t k = 0; k < len; k += kW) {
    V wv[R];
    for (int r = 0; r < R; ++r) wv[r] = vload(w[r] + k);
    for (int t = 0; t < T; ++t) {
      const V xv = vload(x + t * ldx + k);
      for (int r = 0; r < R; ++r) a[r][t] = vfma(wv[r], xv, a[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r * T + t] = a[r][t];
}

constexpr int64_t kMaxBlock = 512;  // K elements per block in the batched row kernel
// Tokens per register tile in the batched row kernel: R x 4 accumulators load each weight
// vector once per 4 tokens (R x 2 needed 3 loads per 4 FMAs, and the fp16/bf16 dense
// product at batch 8 ran at ~15 GB/s, load-bound). 16 + 4 + 1 vector registers at R = 4:
// the AVX-512 path has 32; AVX2's 16 spill, so it keeps pairs.
constexpr int kTileTokens = kW >= 16 ? 4 : 2;

// part[r * B + t0 + t] += w[r][0, len) . x[t0 + t][k0, k0 + len) for t < T, via acc.
template <int R, int T>
inline void token_tile(const float* const* wr, const float* x, int64_t K, int64_t k0,
                       int64_t len, int64_t t0, int64_t B, V* part, V* acc) {
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r * T + t] = part[r * B + t0 + t];
  tile_rt<R, T>(wr, x + t0 * K + k0, K, len, acc);
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) part[r * B + t0 + t] = acc[r * T + t];
}

// res[r * B + b] = w[r] . x[b] for R rows and B > 1 tokens. K is cut into blocks whose x
// slice for all tokens stays in L1; a block of fp16/bf16 rows is converted to fp32 once
// (into `wbuf`, R x kMaxBlock floats) and reused by every token; inside a block tokens go
// in pairs (R x 2 tile). `part` holds R * B vector partial sums.
template <typename WT, int R>
inline void dot_rows_tokens(const WT* const* w, const float* x, int64_t K, int64_t B,
                            float* res, V* part, float* wbuf, const RowStreams& pf) {
  for (int64_t i = 0; i < R * B; ++i) part[i] = vzero();
  const int64_t Kv = K / kW * kW;
  int64_t kb = (int64_t(4096) / B) / kW * kW;  // 16 KiB of x per block
  kb = kb < 4 * kW ? 4 * kW : (kb > kMaxBlock ? kMaxBlock : kb);
  V acc[R * kTileTokens];
  const float* wr[R];
  for (int64_t k0 = 0; k0 < Kv; k0 += kb) {
    const int64_t len = k0 + kb < Kv ? kb : Kv - k0;
    // the run-time prefetch loop: the batch-1 loops' compile-time stream count (at_n) lost
    // here in a same-process A/B (2026-11-26 17:16 UTC, load 2.0-2.1, 4096x16384 b8, at_n
    // vs at: fp16 row 0% 7731 vs 6614 us, 50% 3908 vs 2540 us; bf16 axpy 0% 7283 vs 5785
    // us; fp32 row 8489 vs 9837 us the one clear gain), perhaps as a block's 64 prefetches
    // then go out back to back instead of spread over the block's work (not measured apart)
    pf.at(k0 * int64_t(sizeof(WT)), len * int64_t(sizeof(WT)));
    for (int r = 0; r < R; ++r) {
      if constexpr (sizeof(WT) == sizeof(float)) {
        wr[r] = reinterpret_cast<const float*>(w[r]) + k0;
      } else {
        float* dst = wbuf + r * kMaxBlock;
        for (int64_t k = 0; k < len; k += kW) vstore(dst + k, vload(w[r] + k0 + k));
        wr[r] = dst;
      }
    }
    int64_t t0 = 0;
    for (; t0 + kTileTokens <= B; t0 += kTileTokens)
      token_tile<R, kTileTokens>(wr, x, K, k0, len, t0, B, part, acc);
    for (; t0 + 2 <= B; t0 += 2) token_tile<R, 2>(wr, x, K, k0, len, t0, B, part, acc);
    if (t0 < B) token_tile<R, 1>(wr, x, K, k0, len, t0, B, part, acc);
  }
  for (int r = 0; r < R; ++r) {
    for (int64_t b = 0; b < B; ++b) {
      float sum = vhsum(part[r * B + b]);
      for (int64_t k = Kv; k < K; ++k) sum += to_f32(w[r][k]) * x[b * K + k];
      res[r * B + b] = sum;
    }
  }
}

#ifdef PBOPS_BF16_DOT
// part[r * B + t0 + t] += w[r][k0, k0 + len) . xb[t0 + t][k0, k0 + len) for t < T, with
// vdpbf16ps: each 32-lane weight vector is loaded once for T tokens, each token vector once
// for R rows (len a multiple of kWB; xb rows ldx apart).
template <int R, int T>
inline void token_tile_bf16(const bf16* const* w, const bf16* xb, int64_t ldx, int64_t k0,
                            int64_t len, int64_t t0, int64_t B, V* part) {
  V a[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) a[r][t] = part[r * B + t0 + t];
  const bf16* xt = xb + t0 * ldx + k0;
  for (int64_t k = 0; k < len; k += kWB) {
    VB wv[R];
    for (int r = 0; r < R; ++r) wv[r] = vload_bf16(w[r] + k0 + k);
    for (int t = 0; t < T; ++t) {
      const VB xv = vload_bf16(xt + t * ldx + k);
      for (int r = 0; r < R; ++r) a[r][t] = vdot_bf16(a[r][t], wv[r], xv);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) part[r * B + t0 + t] = a[r][t];
}

// res[r * B + b] = w[r] . x[b] for R bf16 rows and B > 1 tokens whose inputs are exact bf16
// values (xb: x as bf16, rows K / kWB * kWB long): the products are exact in fp32, so only
// the order of the fp32 additions differs from the convert-and-FMA kernel. With
// convert-and-FMA the bf16 product at batch 8 was bound by instructions (18.6 GB/s, where
// torch's oneDNN bf16 GEMM reached 30 GB/s on the same host, 2026-11-26); vdpbf16ps does
// two multiply-adds per fp32 lane and needs no conversion. K is cut into blocks whose x
// slice for all tokens stays in L1; the K % kWB tail is added in fp32.
template <int R>
inline void dot_rows_tokens_bf16(const bf16* const* w, const bf16* xb, const float* x,
                                 int64_t K, int64_t B, float* res, V* part,
                                 const RowStreams& pf) {
  for (int64_t i = 0; i < R * B; ++i) part[i] = vzero();
  const int64_t Kb = K / kWB * kWB;
  int64_t kb = (int64_t(8192) / B) / kWB * kWB;  // 16 KiB of bf16 x per block
  kb = kb < 2 * kWB ? 2 * kWB : (kb > 1024 ? 1024 : kb);
  for (int64_t k0 = 0; k0 < Kb; k0 += kb) {
    const int64_t len = k0 + kb < Kb ? kb : Kb - k0;
    pf.at(k0 * int64_t(sizeof(bf16)), len * int64_t(sizeof(bf16)));
    int64_t t0 = 0;
    for (; t0 + 4 <= B; t0 += 4) token_tile_bf16<R, 4>(w, xb, Kb, k0, len, t0, B, part);
    for (; t0 + 2 <= B; t0 += 2) token_tile_bf16<R, 2>(w, xb, Kb, k0, len, t0, B, part);
    if (t0 < B) token_tile_bf16<R, 1>(w, xb, Kb, k0, len, t0, B, part);
  }
  for (int r = 0; r < R; ++r) {
    for (int64_t b = 0; b < B; ++b) {
      float sum = vhsum(part[r * B + b]);
      for (int64_t k = Kb; k < K; ++k) sum += to_f32(w[r][k]) * x[b * K + k];
      res[r * B + b] = sum;
    }
  }
}

// out[t0 + t][k0, k0 + len) += the Q rows' products for T tokens (len a multiple of 16):
// pair vector p of column block k sits at w + p * ldw + 2 k (axpy_group_bn_bf16), cv[t][p]
// is token t's pair of coefficients; T outputs stay in registers over all the pairs.
template <int P, int T>
inline void axpy_tile_bf16(const bf16* w, int64_t ldw, const VB (*cv)[P], float* out,
                           int64_t D, int64_t k0, int64_t len) {
  for (int64_t k = 0; k < len; k += kWB / 2) {
    V y[T];
    for (int t = 0; t < T; ++t) y[t] = vload(out + t * D + k0 + k);
    for (int p = 0; p < P; ++p) {
      const VB wv = vload_bf16(w + p * ldw + 2 * k);
      for (int t = 0; t < T; ++t) y[t] = vdot_bf16(y[t], wv, cv[t][p]);
    }
    for (int t = 0; t < T; ++t) vstore(out + t * D + k0 + k, y[t]);
  }
}

// out[b][0, D) += sum_q c[b * Q + q] * rows[q][0, D) for B > 1 tokens whose coefficients
// are exact bf16 values (axpy_impl checks), with vdpbf16ps: each chunk of a row pair is
// interleaved once into L1 scratch (lane 2j: the pair's first row, lane 2j + 1: its second,
// column j; an odd row out pairs with zeros), then each token adds both rows' products to
// an fp32 lane in one instruction, where convert-and-FMA needs a conversion and one FMA per
// row (the dense bf16 product at batch 8 already takes vdpbf16ps: dot_rows_tokens_bf16).
// Tiles of 4 tokens keep their outputs in registers over all Q rows, and axpy_impl gives
// this kernel 8 rows per group (4 pair vectors per output load and store). The products
// are exact in fp32: only the order of the additions differs. bf16 axpy 4096x16384 b8,
// 2026-11-26 23:17-23:20 UTC: convert-and-FMA 0.52x dense at 0% sparsity, vdpbf16ps with
// 4 rows 0.73-0.81x, with 8 rows 0.94-1.02x (same process, two runs; 50%: 1.42-1.56x ->
// 1.77-2.01x, 90%: 6.1-7.0x -> 8.0-9.0x).
template <int Q>
inline void axpy_group_bn_bf16(const bf16* const* rows, const float* c /*[B][Q]*/, int64_t B,
                               float* out, int64_t D, bf16* scratch, const RowStreams& pf) {
  constexpr int P = (Q + 1) / 2;  // row pairs
  for (int64_t kc = 0; kc < D; kc += kChunk) {
    const int64_t ke = kc + kChunk < D ? kc + kChunk : D;
    pf.at(kc * int64_t(sizeof(bf16)), (ke - kc) * int64_t(sizeof(bf16)));
    const int64_t len = (ke - kc) / kWB * kWB;
    for (int p = 0; p < P; ++p) {
      const bf16* a = rows[2 * p] + kc;
      const bf16* b = 2 * p + 1 < Q ? rows[2 * p + 1] + kc : nullptr;
      bf16* dst = scratch + p * 2 * kChunk;
      for (int64_t k = 0; k < len; k += kWB) vinterleave_bf16(a + k, b ? b + k : nullptr, dst + 2 * k);
    }
    VB cv[4][P];  // a tile's coefficients, two rows per vector
    auto tile = [&](auto n, int64_t t0) {
      constexpr int T = decltype(n)::value;
      for (int t = 0; t < T; ++t)
        for (int p = 0; p < P; ++p) {
          const float* ct = c + (t0 + t) * Q;
          const uint32_t lo = simd::bits_of(ct[2 * p]) >> 16;
          const uint32_t hi = 2 * p + 1 < Q ? simd::bits_of(ct[2 * p + 1]) >> 16 : 0u;
          cv[t][p] = vpair_bf16(lo | (hi << 16));
        }
      axpy_tile_bf16<P, T>(scratch, 2 * kChunk, cv, out + t0 * D, D, kc, len);
    };
    int64_t t0 = 0;
    for (; t0 + 4 <= B; t0 += 4) tile(std::integral_constant<int, 4>{}, t0);
    for (; t0 + 2 <= B; t0 += 2) tile(std::integral_constant<int, 2>{}, t0);
    if (t0 < B) tile(std::integral_constant<int, 1>{}, t0);
    for (int64_t k = kc + len; k < ke; ++k)  // the columns past the last whole pair vector
      for (int64_t t = 0; t < B; ++t) {
        float y = out[t * D + k];
        for (int q = 0; q < Q; ++q) y += c[t * Q + q] * to_f32(rows[q][k]);
        out[t * D + k] = y;
      }
  }
}
#endif

// Whether vdpbf16ps reads v as itself: an exact bf16 value, normal or zero (it reads
// subnormals as zero).
inline bool bf16_dot_exact(float v) {
  const uint32_t u = simd::bits_of(v);
  return (u & 0xffffu) == 0 && ((u & 0x7f800000u) != 0 || (u & 0x7fffffffu) == 0);
}

// x [B, K] as bf16 rows of K / kWB * kWB (caller's scratch) for the bf16 dot product: only on
// a path that has it, for bf16 weights and B > 1 tokens (one token is bandwidth-bound, the
// FMA loop keeps up), and only when every input is exactly a normal bf16 value or zero
// (vdpbf16ps reads subnormals as zero); else null (the convert-and-FMA kernel).
template <typename WT>
inline const bf16* bf16_tokens(const float* x, int64_t B, int64_t K) {
#ifdef PBOPS_BF16_DOT
  if constexpr (std::is_same_v<WT, bf16>) {
    if (B < 2 || K < kWB) return nullptr;
    bool exact = true;
    for (int64_t i = 0; i < B * K; ++i) exact &= bf16_dot_exact(x[i]);
    if (!exact) return nullptr;
    const int64_t Kb = K / kWB * kWB;
    bf16* xb = static_cast<bf16*>(thread_scratch(2, sizeof(bf16) * B * Kb));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < Kb; ++k) xb[b * Kb + k].v = uint16_t(simd::bits_of(x[b * K + k]) >> 16);
    return xb;
  }
#endif
  (void)x, (void)B, (void)K;
  return nullptr;
}

// Per-thread buffers of the row kernels: results [kRowGroup][B] twice, vector partials.
struct GroupScratch {
  float* res;
  float* res2;
  V* part;
  float* wbuf;
  const bf16* xb;  // the tokens as bf16 for the bf16 dot product (bf16_tokens), or null
  GroupScratch(int64_t B, const bf16* xb_) : xb(xb_) {
    res = static_cast<float*>(thread_scratch(0, sizeof(float) * 2 * kMaxSlots * B));
    res2 = res + kMaxSlots * B;
    part = static_cast<V*>(thread_scratch(1, sizeof(V) * kRowGroup * B));
    wbuf = static_cast<float*>(thread_scratch(3, sizeof(float) * kRowGroup * kMaxBlock));
  }
};

// res[q * B + b] = rows[q] . x[b] for q < count (<= kMaxSlots at B == 1, else kRowGroup).
template <typename WT>
inline void dot_group(const WT* const* rows, int count, const float* x, int64_t K, int64_t B,
                      const GroupScratch& sc, float* res, const RowStreams& pf) {
  if (B == 1) {
    with_count<kMaxSlots>(count, [&](auto n) {
      dot_rows<WT, decltype(n)::value>(rows, x, K, res, pf);
    });
    return;
  }
  with_count<kRowGroup>(count, [&](auto n) {
    constexpr int R = decltype(n)::value;
#ifdef PBOPS_BF16_DOT
    if constexpr (std::is_same_v<WT, bf16>) {
      if (sc.xb) {
        dot_rows_tokens_bf16<R>(rows, sc.xb, x, K, B, res, sc.part, pf);
        return;
      }
    }
#endif
    dot_rows_tokens<WT, R>(rows, x, K, B, res, sc.part, sc.wbuf, pf);
  });
}

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

inline float gated_value(GatedKind kind, float g, float u) {
  if (kind == kReGLU) return g > 0.0f ? g * u : 0.0f;
  if (kind == kDReLU) return (g > 0.0f && u > 0.0f) ? g * u : 0.0f;
  return silu(g) * u;
}

// The row kernel's walk: rows idx[0..n) of W (rows 0..n-1 when idx is null), claimed in
// chunks and read kRowGroup at a time by the slots (walk_slots), each step prefetched as
// continuous streams and dotted with the B inputs, then `emit(pos, count, res)` writes its
// results (res[q * B + b]: the row at id-list position pos[q], input b).
template <typename WT, typename Emit>
void for_row_groups(const WT* w, int64_t K, const float* x, int64_t B, const int64_t* idx,
                    int64_t n, int nt, Emit emit) {
  const int threads = n * K * B >= kParallelMin && nt > 1 ? nt : 1;
  const int slots = gather_slots(idx, n, B);
  const int64_t grab = rows_per_grab(K * int64_t(sizeof(WT)), n, threads, slots);
  const bf16* xb = bf16_tokens<WT>(x, B, K);
  parallel_for(n, grab, threads, [&](int64_t p0, int64_t p1, int) {
    GroupScratch sc(B, xb);
    walk_row_streams(w, K, idx, p0, p1, slots, [&](const int64_t* pos, int count,
                                                   const WT* const* rows, const RowStreams& pf) {
      dot_group(rows, count, x, K, B, sc, sc.res, pf);
      emit(pos, count, static_cast<const float*>(sc.res));
    });
  });
}

template <typename WT>
void row_impl(const WT* w, int64_t K, const float* x, int64_t B, const int64_t* idx, int64_t n,
              const float* bias, bool relu, float* out, int64_t ldo, bool scatter, int nt) {
  for_row_groups(w, K, x, B, idx, n, nt, [&](const int64_t* pos, int count, const float* res) {
    for (int q = 0; q < count; ++q) {
      const int64_t r = idx[pos[q]];
      const float bb = bias ? bias[r] : 0.0f;
      const int64_t col = scatter ? r : pos[q];
      for (int64_t b = 0; b < B; ++b) {
        const float v = res[q * B + b] + bb;
        out[b * ldo + col] = (relu && !(v > 0.0f)) ? 0.0f : v;
      }
    }
  });
}

// Every row of W: the row kernel's walk over rows 0..N-1 (each slot's run is then one
// contiguous stretch of the matrix); the output is written in its own type.
template <typename WT, typename OT>
void dense_impl(const WT* w, int64_t N, int64_t K, const float* x, int64_t B, const float* bias,
                OT* out, int64_t ldo, int nt) {
  for_row_groups(w, K, x, B, nullptr, N, nt, [&](const int64_t* pos, int count, const float* res) {
    for (int q = 0; q < count; ++q) {
      const int64_t j = pos[q];
      const float bb = bias ? bias[j] : 0.0f;
      for (int64_t b = 0; b < B; ++b) store(out + b * ldo + j, res[q * B + b] + bb);
    }
  });
}

template <typename WT>
void dense_out(const WT* w, int64_t N, int64_t K, const float* x, int64_t B, const float* bias,
               WType ot, void* out, int64_t ldo, int nt) {
  simd::with_type(ot, [&](auto tag) {
    using OT = decltype(tag);
    dense_impl(w, N, K, x, B, bias, static_cast<OT*>(out), ldo, nt);
  });
}

template <typename T>
void to_float_impl(const T* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) vstore(dst + i, vload(src + i));
  for (; i < n; ++i) dst[i] = to_f32(src[i]);
}

template <typename T>
void from_float_impl(const float* src, int64_t n, T* dst) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) vstore(dst + i, vload(src + i));
  for (; i < n; ++i) store(dst + i, src[i]);
}

template <typename WT>
void gated_impl(const WT* wg, const WT* wu, int64_t K, const float* x, int64_t B,
                const int64_t* idx, int64_t n, GatedKind kind, float* h, int nt) {
  const int threads = n * K * B >= kParallelMin && nt > 1 ? nt : 1;
  const bool gate_can_skip = kind != kSwiGLU;
  const int slots = gather_slots(idx, n, B);
  const int64_t grab = rows_per_grab(K * int64_t(sizeof(WT)), n, threads, slots);
  const bf16* xb = bf16_tokens<WT>(x, B, K);
  parallel_for(n, grab, threads, [&](int64_t p0, int64_t p1, int) {
    GroupScratch sc(B, xb);
    walk_slots(p0, p1, slots, [&](const int64_t* pos, int count, const int64_t* nxt,
                                  int next_count) {
      const WT *rows[kMaxSlots], *up[kMaxSlots], *next[kMaxSlots];
      rows_at(wg, K, idx, pos, count, rows);
      rows_at(wu, K, idx, pos, count, up);
      // the gate rows' streams continue into these neurons' up rows (read next unless every
      // gate is <= 0)
      const RowStreams gate_pf(rows, count, up, count, K, slots);
      gate_pf.head(pos[0], p0);
      dot_group(rows, count, x, K, B, sc, sc.res, gate_pf);
      // Up rows only for neurons whose gate fired for some token (ReGLU/dReLU): for the
      // others every h is zero and the up row is never read.
      int live[kMaxSlots], m = 0;
      for (int q = 0; q < count; ++q) {
        bool any = !gate_can_skip;
        for (int64_t b = 0; b < B && !any; ++b) any = sc.res[q * B + b] > 0.0f;
        if (any) {
          rows[m] = up[q];
          live[m++] = q;
        } else {
          for (int64_t b = 0; b < B; ++b) h[b * n + pos[q]] = 0.0f;
        }
      }
      if (m == 0) return;
      rows_at(wg, K, idx, nxt, next_count, next);
      dot_group(rows, m, x, K, B, sc, sc.res2, RowStreams(rows, m, next, next_count, K, slots));
      for (int i = 0; i < m; ++i) {
        const int q = live[i];
        for (int64_t b = 0; b < B; ++b)
          h[b * n + pos[q]] = gated_value(kind, sc.res[q * B + b], sc.res2[i * B + b]);
      }
    });
  });
}

// out[c0:c1] += sum_q c[q] * rows[q][c0:c1] for one token (weights converted on the fly).
// Knob axpy_split_chain (default 1: fp32 rows): the Q rows' products are summed in two FMA
// chains that start from zero, and `out` is added at the end, instead of one chain of Q
// FMAs that starts from the loaded `out`. The output vector (16 KiB at d_model 4096) has
// left L1 by the time the next row group comes to it (8 rows of 16 KiB stream through
// between), so the one chain waited on an L2 load before its first FMA and then ran Q
// FMAs in series (4 cycles each on Zen 4); the split chains start at once and are half as
// long. Which of the two matters was not separated (no performance counters here).
// Same-process A/Bs (bench-operators task.variants, 4096x16384 b1, 8 runs, 2026-11-27
// 12:39-12:42 UTC, load 1.4-1.7), speedup over dense, median of the runs, 0 -> 1:
//  - fp32 axpy: 0.948x -> 1.020x at 0% (faster in 8 of 8 runs), 1.066x -> 1.088x at 10%
//    (6 of 8), 1.855x -> 1.975x at 50% (7 of 8), 9.47x -> 9.92x at 90% (6 of 8);
//    fp32 ffn_relu 1.924x -> 2.036x at 50% (8 of 8), even at 0% (0.970x vs 0.965x);
//  - fp16 rows (setting 2): faster in 35 of 64 (run, cell) pairs, ffn_relu at 90% slower
//    in 7 of 8 (8.88x -> 8.50x); bf16 rows (setting 2, 6 runs, 14:00 UTC): faster in 32 of
//    48 pairs, axpy 0.968x -> 0.997x at 0%, 1.804x -> 1.823x at 50%, but slower at 90%
//    (axpy 8.92x -> 8.68x, ffn_relu 9.21x -> 9.07x): so 16-bit rows keep the one chain.
// Whole-model decode, 1 vs 0 in the same rounds (bench-decode task.variants): OPT-6.7B
// shape fp32, 8 layers, 2 threads (12:44 UTC) sparse 6.70 vs 6.66 tok/s, dense 2.94 vs 2.89;
// SmolLM2-135M, oracle, 1 thread (13:17 UTC) sparse 28.0 vs 28.1, dense 20.8 vs 20.7: even.
template <typename WT, int Q>
inline void axpy_group_b1(const WT* const* rows, const float* c, float* out, int64_t c0,
                          int64_t c1, const RowStreams& pf) {
  V cv[Q];
  for (int q = 0; q < Q; ++q) cv[q] = vset1(c[q]);
  int64_t k = c0;
  const int64_t split_at = knob(kKnobAxpySplitChain);
  const bool split = split_at == 2 || (split_at == 1 && sizeof(WT) == sizeof(float));
  with_streams<Q>(pf, [&](auto streams) {
    constexpr int S = decltype(streams)::value;
    if (split) {
      k = pf.loop<S, 2 * kW, int64_t(sizeof(WT))>(k, c1, [&](int64_t kk) {
        V a0 = vmul(cv[0], vload(rows[0] + kk)), a1 = vmul(cv[0], vload(rows[0] + kk + kW));
        V b0 = vzero(), b1 = vzero();
        for (int q = 1; q < Q; q += 2) {
          b0 = vfma(cv[q], vload(rows[q] + kk), b0);
          b1 = vfma(cv[q], vload(rows[q] + kk + kW), b1);
          if (q + 1 < Q) {
            a0 = vfma(cv[q + 1], vload(rows[q + 1] + kk), a0);
            a1 = vfma(cv[q + 1], vload(rows[q + 1] + kk + kW), a1);
          }
        }
        vstore(out + kk, vadd(vload(out + kk), vadd(a0, b0)));
        vstore(out + kk + kW, vadd(vload(out + kk + kW), vadd(a1, b1)));
      });
      return;
    }
    k = pf.loop<S, 2 * kW, int64_t(sizeof(WT))>(k, c1, [&](int64_t kk) {
      V y0 = vload(out + kk), y1 = vload(out + kk + kW);
      for (int q = 0; q < Q; ++q) {
        y0 = vfma(cv[q], vload(rows[q] + kk), y0);
        y1 = vfma(cv[q], vload(rows[q] + kk + kW), y1);
      }
      vstore(out + kk, y0);
      vstore(out + kk + kW, y1);
    });
  });
  for (; k + kW <= c1; k += kW) {
    V y = vload(out + k);
    for (int q = 0; q < Q; ++q) y = vfma(cv[q], vload(rows[q] + k), y);
    vstore(out + k, y);
  }
  for (; k < c1; ++k) {
    float y = out[k];
    for (int q = 0; q < Q; ++q) y += c[q] * to_f32(rows[q][k]);
    out[k] = y;
  }
}

// Token tiles of several tokens: a tile's outputs stay in registers over the Q rows, so
// each weight vector is loaded once per tile and each output once per tile and row group.
// Same-process A/B against token pairs (bench-operators, 4096x16384 b8, 2026-11-26 23:22
// UTC, two runs): fp16 axpy 0.82-0.89x -> 1.01-1.10x dense at 0% sparsity, 1.62-1.75x ->
// 1.98-2.18x at 50%, ffn_relu 0.90-0.94x -> 1.00-1.06x at 0%; fp32 axpy 1-10% faster,
// fp32 ffn_relu within +-3%. Four tokens need 16 coefficient vectors for 4 rows: AVX2's
// 16 registers hold two.
constexpr int kAxpyTile = kW >= 16 ? 4 : 2;

template <int Q, int T>
inline void axpy_tile_f32(const float* const* src, const float* c, float* out, int64_t D,
                          int64_t len) {
  V cv[T][Q];
  for (int t = 0; t < T; ++t)
    for (int q = 0; q < Q; ++q) cv[t][q] = vset1(c[t * Q + q]);
  int64_t k = 0;
  for (; k + kW <= len; k += kW) {
    V y[T];
    for (int t = 0; t < T; ++t) y[t] = vload(out + t * D + k);
    for (int q = 0; q < Q; ++q) {
      const V wv = vload(src[q] + k);
      for (int t = 0; t < T; ++t) y[t] = vfma(cv[t][q], wv, y[t]);
    }
    for (int t = 0; t < T; ++t) vstore(out + t * D + k, y[t]);
  }
  for (; k < len; ++k)
    for (int t = 0; t < T; ++t) {
      float y = out[t * D + k];
      for (int q = 0; q < Q; ++q) y += c[t * Q + q] * src[q][k];
      out[t * D + k] = y;
    }
}

// Several tokens: each chunk of the Q rows is loaded (and converted to fp32) once into
// `scratch` and reused for every token tile from L1.
template <typename WT, int Q>
inline void axpy_group_bn(const WT* const* rows, const float* c, int64_t B, float* out,
                          int64_t D, float* scratch, const RowStreams& pf) {
  for (int64_t kc = 0; kc < D; kc += kChunk) {
    const int64_t ke = kc + kChunk < D ? kc + kChunk : D;
    pf.at(kc * int64_t(sizeof(WT)), (ke - kc) * int64_t(sizeof(WT)));
    const float* src[Q];
    for (int q = 0; q < Q; ++q) {
      if constexpr (sizeof(WT) == sizeof(float)) {
        src[q] = reinterpret_cast<const float*>(rows[q]) + kc;
      } else {
        float* dst = scratch + q * kChunk;
        int64_t k = kc;
        for (; k + kW <= ke; k += kW) vstore(dst + (k - kc), vload(rows[q] + k));
        for (; k < ke; ++k) dst[k - kc] = to_f32(rows[q][k]);
        src[q] = dst;
      }
    }
    const int64_t len = ke - kc;
    int64_t t = 0;
    for (; t + kAxpyTile <= B; t += kAxpyTile)
      axpy_tile_f32<Q, kAxpyTile>(src, c + t * Q, out + t * D + kc, D, len);
    for (; t + 2 <= B; t += 2) axpy_tile_f32<Q, 2>(src, c + t * Q, out + t * D + kc, D, len);
    if (t < B) axpy_tile_f32<Q, 1>(src, c + t * Q, out + t * D + kc, D, len);
  }
}

template <typename WT>
void axpy_impl(const WT* w_t, int64_t D, const float* coeff, int64_t ldc, int64_t B,
               const int64_t* idx, int64_t n, float* out, int nt) {
  // Keep only neurons with a non-zero coefficient for some token: exact, and their rows
  // are never read (after ReLU many predicted-active neurons are in fact zero).
  int64_t* live = static_cast<int64_t*>(thread_scratch(2, sizeof(int64_t) * 2 * (n > 0 ? n : 1)));
  int64_t* cols = live + n;
  int64_t m = 0;
  for (int64_t j = 0; j < n; ++j) {
    bool any = false;
    for (int64_t b = 0; b < B && !any; ++b) any = coeff[b * ldc + j] != 0.0f;
    if (any) {
      live[m] = idx[j];
      cols[m] = j;
      ++m;
    }
  }
  // Workers take chunks of neurons as they come and stream whole rows into a private
  // [B, D] partial sum (the caller straight into `out`); the partials are added at the end.
  const int workers0 = m * D * B >= kParallelMin && nt > 1 ? nt : 1;
  const int workers = workers0 < kMaxWorkers ? workers0 : kMaxWorkers;
  bool bf16_dot = false;  // the bf16 dot product (axpy_group_bn_bf16): exact coefficients
#ifdef PBOPS_BF16_DOT
  if constexpr (std::is_same_v<WT, bf16>) {
    bf16_dot = B > 1;
    for (int64_t j = 0; j < m && bf16_dot; ++j)
      for (int64_t b = 0; b < B && bf16_dot; ++b) bf16_dot = bf16_dot_exact(coeff[b * ldc + cols[j]]);
  }
#endif
  (void)bf16_dot;
  // fp32 rows at batch 1: at least knob axpy_min_slots (default 2) row slots, where one
  // slot (mostly consecutive ids, gather_slots, with knob one_slot_adjacent_pct on) would
  // stream them alone. Same-process A/Bs
  // (bench-operators task.variants, 4096x16384 b1 at 0% sparsity, 2026-11-26 17:19-17:22
  // UTC, load 1.3-2.9, three runs): fp32 0.94x / 0.93x / 0.90x dense with one slot, 0.99x /
  // 1.00x / 0.96x with two; fp16 1.01-1.03x either way; bf16 lost with two (1.04x -> 0.98x,
  // 0.98x -> 0.88x), so 16-bit rows keep one slot.
  int slots = gather_slots(live, m, B);
  const int64_t min_slots = sizeof(WT) == sizeof(float) ? knob(kKnobAxpyMinSlots) : 1;
  if (B == 1 && slots < min_slots) slots = min_slots < kMaxSlots ? int(min_slots) : kMaxSlots;
  if (bf16_dot) slots = kMaxSlots;  // 8 rows per group (axpy_group_bn_bf16)
  const int64_t grab = rows_per_grab(D * int64_t(sizeof(WT)), m, workers, slots);
  float* partial[kMaxWorkers] = {};
  parallel_for(m, grab, workers, [&](int64_t p0, int64_t p1, int worker) {
    float* acc = out;
    if (worker > 0) {
      if (partial[worker] == nullptr) {
        partial[worker] = static_cast<float*>(thread_scratch(2, sizeof(float) * B * D));
        std::memset(partial[worker], 0, sizeof(float) * B * D);
      }
      acc = partial[worker];
    }
    float* cbuf = static_cast<float*>(thread_scratch(0, sizeof(float) * kMaxSlots * B));
    float* scratch = static_cast<float*>(thread_scratch(1, sizeof(float) * kRowGroup * kChunk));
    walk_row_streams(w_t, D, live, p0, p1, slots, [&](const int64_t* pos, int count,
                                                      const WT* const* rows,
                                                      const RowStreams& pf) {
      for (int64_t b = 0; b < B; ++b)
        for (int q = 0; q < count; ++q) cbuf[b * count + q] = coeff[b * ldc + cols[pos[q]]];
      if (B == 1) {
        with_count<kMaxSlots>(count, [&](auto c) {
          axpy_group_b1<WT, decltype(c)::value>(rows, cbuf, acc, 0, D, pf);
        });
      } else {
#ifdef PBOPS_BF16_DOT
        if constexpr (std::is_same_v<WT, bf16>) {
          if (bf16_dot) {
            with_count<kMaxSlots>(count, [&](auto c) {
              axpy_group_bn_bf16<decltype(c)::value>(rows, cbuf, B, acc, D,
                                                     reinterpret_cast<bf16*>(scratch), pf);
            });
            return;
          }
        }
#endif
        with_count<kRowGroup>(count, [&](auto c) {
          axpy_group_bn<WT, decltype(c)::value>(rows, cbuf, B, acc, D, scratch, pf);
        });
      }
    });
  });
  for (int p = 1; p < workers; ++p) {
    const float* src = partial[p];
    if (src == nullptr) continue;  // that helper never got CPU time: nothing to add
    int64_t e = 0;
    for (; e + kW <= B * D; e += kW) vstore(out + e, vadd(vload(out + e), vload(src + e)));
    for (; e < B * D; ++e) out[e] += src[e];
  }
}

double read_sum_impl(const float* buf, int64_t n, int threads) {
  constexpr int64_t kBlock = int64_t(1) << 18;  // 1 MiB of floats per work item
  double sums[kMaxWorkers] = {};
  parallel_for((n + kBlock - 1) / kBlock, 1, threads, [&](int64_t b0, int64_t b1, int worker) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t b = blk * kBlock;
      const int64_t e = b + kBlock < n ? b + kBlock : n;
      V a0 = vzero(), a1 = vzero(), a2 = vzero(), a3 = vzero();
      int64_t k = b;
      for (; k + 4 * kW <= e; k += 4 * kW) {
        a0 = vadd(a0, vload(buf + k));
        a1 = vadd(a1, vload(buf + k + kW));
        a2 = vadd(a2, vload(buf + k + 2 * kW));
        a3 = vadd(a3, vload(buf + k + 3 * kW));
      }
      double s = vhsum(vadd(vadd(a0, a1), vadd(a2, a3)));
      for (; k < e; ++k) s += buf[k];
      sums[worker] += s;
    }
  });
  double total = 0.0;
  for (double v : sums) total += v;
  return total;
}
