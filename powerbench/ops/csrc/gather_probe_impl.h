// Read-only gather probe: the machine's ceiling for a sparse operator's memory reads.
//
// It reads exactly the weight bytes an operator reads (the rows idx[0..n) of a row-major
// matrix, in their own layout) with plain vector loads and one integer add per load: no
// dtype conversion, no multiply-add, no output. What it takes is the time this machine
// needs to bring those bytes through the cores, so an operator's time over the probe's is
// the share of the ceiling it reaches, and dense time over the probe's the speedup a
// perfect operator would show. Three ways of reading the same bytes (the ceiling is the
// fastest of them, bench-operators times all three):
//  - kProbeSlots: the operators' own schedule (chunks claimed from the pool, kRowGroup row
//    slots per thread, each a continuous software-prefetched stream: for_row_groups);
//  - kProbeWide: the same with kMaxSlots row slots per thread (8 on AVX-512; the kernels'
//    batch-1 schedule for scattered rows, knob wide_adjacent_pct);
//  - kProbeRuns: ids sorted (a sorted list is only scanned), runs of adjacent rows merged
//    into one span, spans cut into pieces of whole rows of about kProbePieceBytes, pieces
//    claimed from the pool and read by each thread as one stream prefetched
//    kRowGroup * prefetch_bytes ahead (the bytes the slots keep in flight), on into the next
//    piece of its claim.
// All run on `threads` workers of the same pool as the operators.
//
// The result is the sum, modulo 2^32, of every row's bytes read as little-endian 32-bit
// words from the row's start (a last partial word zero-padded): exact and independent of
// the order of the reads, so tests check it against a plain reference.

enum ProbeMode : int { kProbeSlots = 0, kProbeRuns = 1, kProbeWide = 2 };

// One vector of 32-bit words: kW * 4 bytes (a full register on AVX-512 and AVX2).
typedef uint32_t ProbeVec __attribute__((vector_size(kW * 4)));
constexpr int64_t kProbeVB = kW * 4;
constexpr int64_t kProbePieceBytes = int64_t(256) << 10;

inline ProbeVec probe_load(const char* p) {
  ProbeVec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint32_t probe_hsum(const ProbeVec& v) {
  uint32_t s = 0;
  for (int i = 0; i < kW; ++i) s += v[i];
  return s;
}

// bytes [off, len) of a row whose vector part ends at `off`: whole vectors, then words
inline uint32_t probe_tail(const char* p, int64_t off, int64_t len) {
  uint32_t s = 0;
  for (; off + kProbeVB <= len; off += kProbeVB) s += probe_hsum(probe_load(p + off));
  for (; off + 4 <= len; off += 4) {
    uint32_t w;
    std::memcpy(&w, p + off, 4);
    s += w;
  }
  if (off < len) {
    uint32_t w = 0;
    std::memcpy(&w, p + off, size_t(len - off));
    s += w;
  }
  return s;
}

// R rows of `len` bytes read side by side, prefetched as the operators' row streams.
template <int R>
inline uint32_t probe_group(const char* const* w, int64_t len, const RowStreams& pf) {
  ProbeVec a[R][2];
  for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = ProbeVec{};
  int64_t k = 0;
  with_streams<R>(pf, [&](auto streams) {
    constexpr int S = decltype(streams)::value;
    k = pf.loop<S, 2 * kProbeVB, 1>(k, len, [&](int64_t kk) {
      for (int r = 0; r < R; ++r) {
        a[r][0] += probe_load(w[r] + kk);
        a[r][1] += probe_load(w[r] + kk + kProbeVB);
      }
    });
  });
  ProbeVec s{};
  for (int r = 0; r < R; ++r) s += a[r][0] + a[r][1];
  uint32_t t = probe_hsum(s);
  for (int r = 0; r < R; ++r) t += probe_tail(w[r], k, len);
  return t;
}

inline uint32_t probe_slots(const char* base, int64_t row_bytes, int64_t row_len,
                            const int64_t* idx, int64_t n, int nt, int slots) {
  const int threads = n * row_len >= kParallelMin && nt > 1 ? nt : 1;
  const int64_t grab = rows_per_grab(row_bytes, n, threads, slots);
  uint32_t sums[kMaxWorkers] = {};
  parallel_for(n, grab, threads, [&](int64_t p0, int64_t p1, int worker) {
    uint32_t s = 0;
    walk_row_streams(base, row_bytes, idx, p0, p1, slots, [&](const int64_t*, int count,
                                                              const char* const* rows,
                                                              const RowStreams& pf) {
      with_count<kMaxSlots>(count, [&](auto c) {
        s += probe_group<decltype(c)::value>(rows, row_bytes, pf);
      });
    });
    sums[worker] += s;
  });
  uint32_t total = 0;
  for (uint32_t v : sums) total += v;
  return total;
}

struct ProbePiece {
  const char* p;
  int64_t bytes;
};

// pieces [i0, i1) read as one stream: 4 vectors per step, each line prefetched d bytes
// ahead (past a piece's end, into the next piece). Pieces are whole rows; with rows whose
// length is not a multiple of 4 bytes every piece is one row (words start at each row).
inline uint32_t probe_stream(const ProbePiece* pc, int64_t i0, int64_t i1, int64_t d) {
  ProbeVec a0{}, a1{}, a2{}, a3{};
  uint32_t t = 0;
  for (int64_t i = i0; i < i1; ++i) {
    const char* p = pc[i].p;
    const int64_t len = pc[i].bytes;
    const char* after = (i + 1 < i1 ? pc[i + 1].p : p) + (d - len);  // + o: d past the end
    const char* ahead = p + d;
    const int64_t switch_off = len - d;
    int64_t k = 0;
    for (; k + 4 * kProbeVB <= len; k += 4 * kProbeVB) {
      for (int64_t o = k; o < k + 4 * kProbeVB; o += 64) prefetch_l2((o < switch_off ? ahead : after) + o);
      a0 += probe_load(p + k);
      a1 += probe_load(p + k + kProbeVB);
      a2 += probe_load(p + k + 2 * kProbeVB);
      a3 += probe_load(p + k + 3 * kProbeVB);
    }
    t += probe_tail(p, k, len);
  }
  return t + probe_hsum((a0 + a1) + (a2 + a3));
}

inline uint32_t probe_runs(const char* base, int64_t row_bytes, int64_t row_len,
                           const int64_t* idx, int64_t n, int nt) {
  if (n == 0 || row_bytes == 0) return 0;
  // sorted ids (a sorted list, as a predictor's nonzero gives, is only scanned)
  const int64_t* ids = idx;
  bool sorted = true;
  for (int64_t j = 1; j < n && sorted; ++j) sorted = idx[j - 1] < idx[j];
  if (!sorted) {
    int64_t* copy = static_cast<int64_t*>(thread_scratch(1, sizeof(int64_t) * n));
    std::memcpy(copy, idx, sizeof(int64_t) * n);
    std::sort(copy, copy + n);
    ids = copy;
  }
  // runs of adjacent rows cut into pieces of whole rows
  const int64_t rows_per_piece =
      row_bytes % 4 != 0 ? 1 : (kProbePieceBytes + row_bytes - 1) / (row_bytes > 0 ? row_bytes : 1);
  ProbePiece* pieces = static_cast<ProbePiece*>(thread_scratch(2, sizeof(ProbePiece) * n));
  int64_t np = 0;
  for (int64_t j = 0; j < n;) {
    int64_t e = j + 1;
    while (e < n && e - j < rows_per_piece && ids[e] == ids[e - 1] + 1) ++e;
    pieces[np++] = {base + ids[j] * row_bytes, (e - j) * row_bytes};
    j = e;
  }
  const int threads = n * row_len >= kParallelMin && nt > 1 ? nt : 1;
  // claims of about the operators' chunk (kRowGroup runs of run_kb), at least
  // chunks_per_thread per thread
  const int64_t per = knob(kKnobChunksPerThread) * threads;
  const int64_t balanced = (np + per - 1) / per;
  const int64_t by_bytes = (kRowGroup * (knob(kKnobRunKB) << 10)) * np / (n * row_bytes);
  const int64_t grain = by_bytes < balanced ? by_bytes : balanced;
  const int64_t d = kRowGroup * knob(kKnobPrefetchBytes);
  uint32_t sums[kMaxWorkers] = {};
  parallel_for(np, grain < 1 ? 1 : grain, threads, [&](int64_t i0, int64_t i1, int worker) {
    sums[worker] += probe_stream(pieces, i0, i1, d);
  });
  uint32_t total = 0;
  for (uint32_t v : sums) total += v;
  return total;
}

uint32_t gather_probe_impl(const void* w, int64_t row_len, int64_t elem_bytes,
                           const int64_t* idx, int64_t n, int mode, int threads) {
  const char* base = static_cast<const char*>(w);
  const int64_t row_bytes = row_len * elem_bytes;
  if (mode == kProbeRuns) return probe_runs(base, row_bytes, row_len, idx, n, threads);
  return probe_slots(base, row_bytes, row_len, idx, n, threads,
                     mode == kProbeWide ? kMaxSlots : kRowGroup);
}
