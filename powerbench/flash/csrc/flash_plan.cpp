// One layer call's planning for the flash engine (powerbench/flash/plan.py), in one call:
// the cache lookup and the LRU admission of SegmentedNeuronCache (lookup_slots + admit,
// powerbench/solver/neuron_cache.py, the same policy), the arena row of every active neuron and
// the fc1 biases of the admitted clusters. Plain C ABI (ctypes), no Python per neuron.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

extern "C" {

// ids[n_ids]: active neurons, ascending and distinct. cn: neurons per cluster.
// slot_of[units]: this layer's cluster -> slot (-1 absent); owner/last_used[n_slots].
// state[0] tick, state[1] call_start (in/out); state[2] (out): 1 if two missing clusters
// are adjacent in the file (the caller then coalesces their reads), else 0.
// lru_a..lru_b: the layer's LRU slots.
// admit: misses get LRU slots (else all go to scratch). scratch_base: first scratch slot.
// Outputs: units_out[n_units] (distinct clusters, ascending), rows[n_ids] (arena row of
// each neuron, misses included at their new slots), resident[n_ids] (1: was a hit),
// miss_units / miss_slots [n_miss] (ascending clusters and their new slots).
// b1_layer (may be null): the layer's fc1 bias, padded to whole clusters; b1_arena: the
// arena's; the admitted and spilled clusters' biases are copied.
// counts[7] += lookups, hot_hits, lru_hits, misses, admitted, evicted, bypassed (if count).
// Returns n_miss (-2, touching nothing, if ids are not ascending and distinct);
// *n_units_out = clusters looked up.
int64_t pb_flash_plan(const int64_t* ids, int64_t n_ids, int64_t cn, int64_t* slot_of,
                      int64_t* owner, int64_t* last_used, int64_t* state, int64_t n_hot,
                      int64_t lru_a, int64_t lru_b, int admit, int64_t scratch_base,
                      int64_t* units_out, int64_t* n_units_out, int64_t* rows,
                      uint8_t* resident, int64_t* miss_units, int64_t* miss_slots,
                      const float* b1_layer, float* b1_arena, int count, int64_t* counts) {
  // distinct clusters, ascending (ids ascending -> cluster ids non-decreasing)
  for (int64_t i = 1; i < n_ids; ++i)
    if (ids[i] <= ids[i - 1]) return -2;  // not ascending and distinct: nothing changed
  int64_t n_units = 0;
  for (int64_t i = 0; i < n_ids; ++i) {
    const int64_t u = ids[i] / cn;
    if (n_units == 0 || units_out[n_units - 1] != u) {
      // the slot map's row is cold (the kernels streamed weights through the cache since
      // the last call): start every cluster's load now so that the misses overlap
      __builtin_prefetch(&slot_of[u]);
      units_out[n_units++] = u;
    }
  }
  *n_units_out = n_units;
  // lookup: stamp LRU hits in order, count
  int64_t tick = state[0];
  const int64_t call_start = tick;
  int64_t n_lru = 0, n_miss = 0;
  for (int64_t j = 0; j < n_units; ++j) {
    const int64_t s = slot_of[units_out[j]];
    if (s < 0) {
      miss_units[n_miss++] = units_out[j];
    } else if (s >= n_hot) {
      last_used[s] = tick + n_lru;
      ++n_lru;
    }
  }
  tick += std::max<int64_t>(n_lru, 1);
  if (count) {
    counts[0] += n_units;
    counts[1] += n_units - n_lru - n_miss;
    counts[2] += n_lru;
    counts[3] += n_miss;
  }
  // admission: the least recently used slots not stamped by this call, oldest first
  int64_t n_adm = 0, evicted = 0;
  if (n_miss && admit && lru_b > lru_a) {
    // the n_miss smallest (last_used, slot) pairs in one pass through a bounded max-heap
    // (no copy of the segment: a call misses a few clusters of thousands of LRU slots)
    using Cand = std::pair<int64_t, int64_t>;
    thread_local std::vector<Cand> cand;
    cand.clear();
    const size_t keep = static_cast<size_t>(n_miss);
    for (int64_t s = lru_a; s < lru_b; ++s) {
      const int64_t t = last_used[s];
      if (t >= call_start) continue;
      const Cand c(t, s);
      if (cand.size() < keep) {
        cand.push_back(c);
        std::push_heap(cand.begin(), cand.end());
      } else if (c < cand.front()) {
        std::pop_heap(cand.begin(), cand.end());
        cand.back() = c;
        std::push_heap(cand.begin(), cand.end());
      }
    }
    std::sort_heap(cand.begin(), cand.end());  // oldest first
    n_adm = static_cast<int64_t>(cand.size());
    if (n_adm) {
      for (int64_t k = 0; k < n_adm; ++k) {
        const int64_t v = cand[k].second, old = owner[v], u = miss_units[k];
        if (old >= 0) {
          slot_of[old] = -1;
          ++evicted;
        }
        owner[v] = u;
        slot_of[u] = v;
        last_used[v] = tick + k;
        miss_slots[k] = v;
      }
      tick += n_adm;
    }
  }
  for (int64_t k = n_adm; k < n_miss; ++k) miss_slots[k] = scratch_base + (k - n_adm);
  if (count && n_miss) {
    counts[4] += n_adm;
    counts[5] += evicted;
    counts[6] += n_miss - n_adm;
  }
  state[0] = tick;
  state[1] = call_start;
  int64_t adjacent = 0;
  for (int64_t k = 1; k < n_miss && !adjacent; ++k)
    adjacent = miss_units[k] - miss_units[k - 1] == 1;
  state[2] = adjacent;
  // rows of every neuron; residency as before the admission
  int64_t j = -1, m = 0, prev = -1, slot = -1;
  uint8_t hit = 0;
  for (int64_t i = 0; i < n_ids; ++i) {
    const int64_t u = ids[i] / cn;
    if (u != prev) {
      prev = u;
      ++j;
      if (m < n_miss && miss_units[m] == u) {
        slot = miss_slots[m++];
        hit = 0;
      } else {
        slot = slot_of[u];
        hit = 1;
      }
    }
    rows[i] = slot * cn + (ids[i] - u * cn);
    resident[i] = hit;
  }
  if (b1_layer && b1_arena) {
    for (int64_t k = 0; k < n_miss; ++k)
      for (int64_t q = 0; q < cn; ++q)
        b1_arena[miss_slots[k] * cn + q] = b1_layer[miss_units[k] * cn + q];
  }
  return n_miss;
}

}  // extern "C"
