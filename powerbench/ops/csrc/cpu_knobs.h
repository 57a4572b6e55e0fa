// Tuning knobs of the CPU kernels, read at run time (each call reads the current value), so
// two settings of one knob can be timed side by side in one process (bench-operators
// task.variants) instead of across processes or rebuilds, which vary far more than the
// effect on a shared VM. Set through torch.ops.powerbench_cpu.set_cpu_knobs; every value
// is checked against its range on the Python side (powerbench/ops/cpu_knobs.py) and here.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

namespace pbops {

enum Knob : int {
  kKnobPrefetchBytes = 0,  // software prefetch distance per row stream (rows >= 4 KiB)
  kKnobRunKB,              // KiB each row slot streams per claimed chunk (the thread split)
  kKnobSpinUs,             // µs a pool helper spins for the next job before it sleeps
  kKnobPrewake,            // 1: an operator wakes the sleeping helpers on entry (before its setup)
  kKnobChunksPerThread,    // at least this many claimed chunks per thread (caps the chunk size)
  kKnobHeadPrefetch,       // 1: a chunk's first rows have their first lines prefetched at once
  kKnobWakeAheadUs,        // a sleeping helper wakes this long before the next job is due (0: off)
  kKnobWakeAheadPct,       // ... or this percentage of the predicted gap, if longer (0: off)
  kKnobWideAdjacentPct,    // batch 1: 2x row slots where < this % of ids follow their predecessor (101: all)
  kKnobOneSlotAdjacentPct, // batch 1: one row slot where >= this % of ids do (0: off)
  kKnobStreamLoop,         // 1: row loops prefetch without a per-line select (RowStreams::loop)
  kKnobAxpyMinSlots,       // batch-1 axpy of fp32 rows: at least this many row slots per thread
  kKnobAxpySplitChain,     // batch-1 axpy: a row group in 2 FMA chains from zero, + out at the end
                           // (0: off, 1: fp32 rows, 2: all rows)
  kKnobCount
};

struct KnobSpec {
  const char* name;
  int64_t value;  // the default
  int64_t lo, hi;
};

// Defaults: see the measured A/B beside each use (sparse_cpu_kernels_impl.h, thread_pool.cpp).
inline constexpr KnobSpec kKnobSpecs[kKnobCount] = {
    {"prefetch_bytes", 2048, 64, 65536},
    {"run_kb", 64, 1, 4096},
    {"spin_us", 100, 0, 1000000},
    {"prewake", 0, 0, 1},
    {"chunks_per_thread", 4, 1, 64},
    {"head_prefetch", 0, 0, 1},
    {"wake_ahead_us", 200, 0, 100000},
    {"wake_ahead_pct", 0, 0, 90},
    {"wide_adjacent_pct", 101, 0, 101},
    {"one_slot_adjacent_pct", 0, 0, 100},
    {"stream_loop", 1, 0, 1},
    {"axpy_min_slots", 2, 1, 8},
    {"axpy_split_chain", 1, 0, 2},
};

inline std::atomic<int64_t> g_knobs[kKnobCount] = {
    kKnobSpecs[0].value, kKnobSpecs[1].value, kKnobSpecs[2].value,
    kKnobSpecs[3].value, kKnobSpecs[4].value, kKnobSpecs[5].value, kKnobSpecs[6].value,
    kKnobSpecs[7].value, kKnobSpecs[8].value, kKnobSpecs[9].value, kKnobSpecs[10].value,
    kKnobSpecs[11].value, kKnobSpecs[12].value};

inline int64_t knob(Knob k) { return g_knobs[k].load(std::memory_order_relaxed); }

// Set knob `name` to `value`; false (and no change) when the name is unknown or the value
// outside its range.
inline bool set_knob(const char* name, int64_t value) {
  for (int k = 0; k < kKnobCount; ++k) {
    const KnobSpec& s = kKnobSpecs[k];
    if (std::strcmp(s.name, name) != 0) continue;
    if (value < s.lo || value > s.hi) return false;
    g_knobs[k].store(value, std::memory_order_relaxed);
    return true;
  }
  return false;
}

}  // namespace pbops
