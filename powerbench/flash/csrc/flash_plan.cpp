// One layer call's planning for the flash engine (powerbench/flash/plan.py), in one call:
// the cache lookup and the LRU admission of SegmentedNeuronCache (lookup_slots + admit,
// powerbench/solver/neuron_cache.py, the same policy), the submission of the missing
// clusters' reads (Linux native AIO, one io_submit through preallocated iocbs), the arena
// row of every active neuron and the fc1 biases of the admitted clusters. Plain C ABI
// (ctypes), one foreign call per layer call, no Python per neuron or read.
//
// Recency: each layer's LRU slots form a doubly linked list ordered by (last_used, slot),
// least recent first. Every new stamp is larger than every older one (the tick only
// grows), so a stamped slot moves to the tail and the list stays in that order: an
// admission takes the oldest slots from the head in O(misses), where a scan of the
// layer's thousands of LRU slots cost ~20 us per call. The lists are built from
// `last_used` by the caller (PbPlanner::lru_*; plan.py `LayerPlanner.sync`).
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>

extern "C" {

struct PbPlanner {
  // the cache (SegmentedNeuronCache's arrays, updated in place)
  int64_t* slot_of;    // [n_layers][units]: cluster -> slot (-1 absent)
  int64_t units;       // clusters per layer
  int64_t* owner;      // [n_slots]: slot -> cluster (-1 free)
  int64_t* last_used;  // [n_slots]
  int64_t* lru_prev;   // [n_slots] (-1: none)
  int64_t* lru_next;   // [n_slots] (-1: none)
  int64_t* lru_head;   // [n_layers]: the least recently used LRU slot (-1: none)
  int64_t* lru_tail;   // [n_layers]
  int64_t n_hot;       // slots [0, n_hot) are pinned
  int64_t scratch_base;
  int64_t cn;          // neurons per cluster
  // state[0] tick, state[1] call start (in/out); out: state[2] 1 if two missing clusters
  // are adjacent in the file, state[3] clusters looked up, state[4] reads submitted here
  // (0: none; -errno: io_submit failed after state[5] reads were accepted); state[6],
  // state[7]: CLOCK_MONOTONIC ns before and after the submission
  int64_t* state;
  // outputs (see pb_flash_step)
  int64_t* units_out;
  int64_t* rows;
  uint8_t* resident;
  int64_t* miss_units;
  int64_t* miss_slots;
  const float* const* b1_layers;  // [n_layers] fc1 biases padded to whole clusters, or null
  float* b1_arena;
  int64_t* counts;  // += lookups, hot_hits, lru_hits, misses, admitted, evicted, bypassed
  // the reads (aio_handle 0: none): read j = one cluster, n_pieces iovecs
  uint64_t aio_handle;
  int64_t nr_submit;             // the io_submit system call number
  uint8_t* iocbs;                // [depth] struct iocb (64 bytes), PREADV, fildes set
  int64_t* const* iocb_ptrs;     // [depth] their addresses
  int64_t* iov;                  // [depth][n_pieces][2] (address, length)
  int64_t n_pieces;
  const int64_t* piece_base;     // [n_pieces]: the buffer address of piece p
  const int64_t* piece_dest;     // [n_pieces]: its byte offset within a slot's rows
  int64_t slot_bytes;            // bytes of one slot in each buffer
  const int64_t* layer_offsets;  // [n_layers]: file offset of each layer's clusters
  int64_t cluster_bytes;
  int64_t depth;                 // iocbs available
};

static inline void lru_unlink(PbPlanner* P, int64_t layer, int64_t s) {
  const int64_t p = P->lru_prev[s], n = P->lru_next[s];
  if (p >= 0) P->lru_next[p] = n; else P->lru_head[layer] = n;
  if (n >= 0) P->lru_prev[n] = p; else P->lru_tail[layer] = p;
}

static inline void lru_append(PbPlanner* P, int64_t layer, int64_t s) {
  const int64_t t = P->lru_tail[layer];
  P->lru_prev[s] = t;
  P->lru_next[s] = -1;
  if (t >= 0) P->lru_next[t] = s; else P->lru_head[layer] = s;
  P->lru_tail[layer] = s;
}

// Give units[0..n) (missing clusters of `layer`, ascending) LRU slots, oldest first among
// the slots not stamped since `call_start`; stamps tick, tick+1, ... Returns the number
// admitted (the rest get no slot); evictions added to *evicted.
static int64_t lru_admit(PbPlanner* P, int64_t layer, const int64_t* units, int64_t n,
                         int64_t* slots, int64_t call_start, int64_t* tick,
                         int64_t* evicted) {
  int64_t* slot_of = P->slot_of + layer * P->units;
  int64_t k = 0;
  while (k < n) {
    const int64_t v = P->lru_head[layer];
    if (v < 0 || P->last_used[v] >= call_start) break;  // the rest: this call's
    const int64_t old = P->owner[v], u = units[k];
    if (old >= 0) {
      slot_of[old] = -1;
      ++*evicted;
    }
    P->owner[v] = u;
    slot_of[u] = v;
    P->last_used[v] = *tick + k;
    lru_unlink(P, layer, v);
    lru_append(P, layer, v);
    slots[k++] = v;
  }
  *tick += k;
  return k;
}

// Submit reads of miss_units[0..n) into miss_slots (one iocb each). Returns 0, or -errno
// with state[5] = reads the kernel accepted before the failure.
static int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

static int64_t submit_reads(PbPlanner* P, int64_t layer, int64_t n) {
  const int64_t base = P->layer_offsets[layer], np = P->n_pieces;
  for (int64_t k = 0; k < n; ++k) {
    uint8_t* cb = P->iocbs + 64 * k;
    const int64_t off = base + P->miss_units[k] * P->cluster_bytes;
    std::memcpy(cb + 40, &off, 8);  // struct iocb.aio_offset
    int64_t* iov = P->iov + 2 * np * k;
    const int64_t dest = P->miss_slots[k] * P->slot_bytes;
    for (int64_t p = 0; p < np; ++p) iov[2 * p] = P->piece_base[p] + dest + P->piece_dest[p];
  }
  int64_t done = 0;
  while (done < n) {
    const long got = syscall(P->nr_submit, P->aio_handle, static_cast<long>(n - done),
                             P->iocb_ptrs + done);
    if (got < 0) {
      if (errno == EINTR) continue;
      P->state[5] = done;
      return -errno;
    }
    done += got;
  }
  return 0;
}

// ids[n_ids]: active neurons, ascending and distinct. flags: 1 admit (misses get LRU
// slots; else all go to scratch), 2 count, 4 submit the misses' reads (when aio_handle is
// set, they fit in `depth` and no two are adjacent in the file).
// Outputs: units_out[state[3]] (distinct clusters, ascending), rows[n_ids] (arena row of
// each neuron, misses included at their new slots), resident[n_ids] (1: was a hit),
// miss_units / miss_slots [n_miss] (ascending clusters and their new slots); the admitted
// and spilled clusters' fc1 biases copied into b1_arena.
// Returns n_miss (-2, touching nothing, if ids are not ascending and distinct).
int64_t pb_flash_step(PbPlanner* P, int64_t layer, const int64_t* ids, int64_t n_ids,
                      int64_t flags) {
  for (int64_t i = 1; i < n_ids; ++i)
    if (ids[i] <= ids[i - 1]) return -2;  // not ascending and distinct: nothing changed
  const int64_t cn = P->cn;
  int64_t* slot_of = P->slot_of + layer * P->units;
  int64_t* units = P->units_out;
  int64_t n_units = 0;
  for (int64_t i = 0; i < n_ids; ++i) {
    const int64_t u = ids[i] / cn;
    if (n_units == 0 || units[n_units - 1] != u) {
      __builtin_prefetch(&slot_of[u]);  // cold after the kernels: overlap the misses
      units[n_units++] = u;
    }
  }
  P->state[3] = n_units;
  // lookup: stamp the LRU hits in order (each to its list's tail), count
  int64_t tick = P->state[0];
  const int64_t call_start = tick;
  int64_t n_lru = 0, n_miss = 0;
  for (int64_t j = 0; j < n_units; ++j) {
    const int64_t s = slot_of[units[j]];
    if (s < 0) {
      P->miss_units[n_miss++] = units[j];
    } else if (s >= P->n_hot) {
      P->last_used[s] = tick + n_lru;
      ++n_lru;
      lru_unlink(P, layer, s);
      lru_append(P, layer, s);
    }
  }
  tick += n_lru > 1 ? n_lru : 1;
  int64_t n_adm = 0, evicted = 0;
  if (n_miss && (flags & 1))
    n_adm = lru_admit(P, layer, P->miss_units, n_miss, P->miss_slots, call_start, &tick,
                      &evicted);
  for (int64_t k = n_adm; k < n_miss; ++k) P->miss_slots[k] = P->scratch_base + (k - n_adm);
  if (flags & 2) {
    int64_t* c = P->counts;
    c[0] += n_units;
    c[1] += n_units - n_lru - n_miss;
    c[2] += n_lru;
    c[3] += n_miss;
    if (n_miss) {
      c[4] += n_adm;
      c[5] += evicted;
      c[6] += n_miss - n_adm;
    }
  }
  P->state[0] = tick;
  P->state[1] = call_start;
  int64_t adjacent = 0;
  for (int64_t k = 1; k < n_miss && !adjacent; ++k)
    adjacent = P->miss_units[k] - P->miss_units[k - 1] == 1;
  P->state[2] = adjacent;
  P->state[4] = 0;
  // the reads first: everything below can run while they are in flight
  if ((flags & 4) && n_miss && !adjacent && P->aio_handle && n_miss <= P->depth) {
    P->state[6] = now_ns();
    const int64_t err = submit_reads(P, layer, n_miss);
    P->state[7] = now_ns();
    P->state[4] = err ? err : n_miss;
  }
  // rows of every neuron; residency as before the admission
  int64_t m = 0, prev = -1, slot = -1;
  uint8_t hit = 0;
  for (int64_t i = 0; i < n_ids; ++i) {
    const int64_t u = ids[i] / cn;
    if (u != prev) {
      prev = u;
      if (m < n_miss && P->miss_units[m] == u) {
        slot = P->miss_slots[m++];
        hit = 0;
      } else {
        slot = slot_of[u];
        hit = 1;
      }
    }
    P->rows[i] = slot * cn + (ids[i] - u * cn);
    P->resident[i] = hit;
  }
  const float* b1_layer = P->b1_layers ? P->b1_layers[layer] : nullptr;
  if (b1_layer && P->b1_arena) {
    for (int64_t k = 0; k < n_miss; ++k)
      for (int64_t q = 0; q < cn; ++q)
        P->b1_arena[P->miss_slots[k] * cn + q] = b1_layer[P->miss_units[k] * cn + q];
  }
  return n_miss;
}

// A lookahead's admission: units[0..n) (missing clusters of `layer`, ascending) get LRU
// slots (oldest first among those not stamped since state[1]) written to slots[]; no
// counting. Returns the number admitted.
int64_t pb_flash_admit(PbPlanner* P, int64_t layer, const int64_t* units, int64_t n,
                       int64_t* slots) {
  int64_t tick = P->state[0], evicted = 0;
  const int64_t k = lru_admit(P, layer, units, n, slots, P->state[1], &tick, &evicted);
  P->state[0] = tick;
  return k;
}

// ---- collecting a batch of native AIO reads -----------------------------------------------
// The kernel's completion ring of an AIO context is mapped at the context's handle
// (struct aio_ring, then struct io_event[nr]); completions can be taken from it in user
// space (what libaio and fio's userspace_reap do), without the io_getevents system call
// and without sleeping: a thread asleep in io_getevents is woken by the completion
// interrupt, which costs ~20 us per batch on the 2-vCPU VM (233-255 vs 212-217 us per
// batch of 12 random 8 KB reads, side by side). The waiter yields the CPU between looks
// (sched_yield) and falls back to io_getevents after `spin_ns`.
struct AioRing {
  unsigned id, nr, head, tail, magic, compat_features, incompat_features, header_length;
};
struct IoEvent {
  uint64_t data, obj;
  int64_t res, res2;
};

// Collect n completions of context `handle` into events[0..n). Returns 0 when every res
// equals `expected`, n when some do not (the caller finishes short reads and reports
// errors from events), -errno when io_getevents fails (events may be lost).
int64_t pb_aio_reap(uint64_t handle, int64_t nr_getevents, int64_t n, IoEvent* events,
                    int64_t expected, int64_t spin_ns) {
  AioRing* ring = reinterpret_cast<AioRing*>(handle);
  const bool user = ring->magic == 0xa10a10a1u && ring->incompat_features == 0;
  int64_t got = 0;
  if (user) {
    const IoEvent* slots = reinterpret_cast<const IoEvent*>(
        reinterpret_cast<const char*>(ring) + ring->header_length);
    const int64_t until = now_ns() + spin_ns;
    unsigned spins = 0;
    while (got < n) {
      unsigned head = __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE);
      const unsigned tail = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
      if (head == tail) {
        if ((++spins & 63) == 0 && now_ns() > until) break;  // long reads: sleep below
        sched_yield();
        continue;
      }
      while (head != tail && got < n) {
        events[got++] = slots[head];
        head = head + 1 == ring->nr ? 0 : head + 1;
      }
      __atomic_store_n(&ring->head, head, __ATOMIC_RELEASE);
    }
  }
  while (got < n) {
    const long r = syscall(nr_getevents, handle, static_cast<long>(n - got),
                           static_cast<long>(n - got), events + got, nullptr);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    got += r;
  }
  for (int64_t k = 0; k < n; ++k)
    if (events[k].res != expected) return n;
  return 0;
}

}  // extern "C"
