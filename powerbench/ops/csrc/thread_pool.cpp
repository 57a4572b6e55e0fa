// Work-claiming thread pool (see thread_pool.h).
#include "thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace pbops {
namespace {

// state_ packs (generation << kIndexBits) | next unclaimed index.
constexpr int kIndexBits = 40;
constexpr uint64_t kIndexMask = (uint64_t(1) << kIndexBits) - 1;
constexpr uint64_t kClosed = kIndexMask;  // index of a closed job: nothing left to claim
constexpr int kSpinBeforeSleep = 4000;    // the caller's wait: ~100 us of pause instructions
constexpr int kSpinCheckEvery = 32;       // pause instructions between two clock reads

inline uint64_t pack(uint64_t gen, uint64_t index) { return (gen << kIndexBits) | index; }
inline uint64_t gen_of(uint64_t s) { return s >> kIndexBits; }
inline uint64_t index_of(uint64_t s) { return s & kIndexMask; }

class Pool {
 public:
  static Pool& instance() {
    static Pool* pool = new Pool();  // leaked on purpose: helpers are detached at exit
    return *pool;
  }

  void run(int64_t n, int64_t grain, int threads, RangeFn fn, void* ctx) {
    std::lock_guard<std::mutex> one_job(run_mu_);  // callers from several threads queue up
    const int helpers = std::min(threads, kMaxWorkers) - 1;
    ensure_helpers(helpers);
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    n_.store(n, std::memory_order_relaxed);
    grain_.store(grain, std::memory_order_relaxed);
    allowed_.store(helpers, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    const uint64_t gen = (gen_of(state_.load(std::memory_order_relaxed)) + 1) &
                         ((uint64_t(1) << (64 - kIndexBits)) - 1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      state_.store(pack(gen, 0), std::memory_order_release);
    }
    cv_.notify_all();
    work(0);
    // Wait for the chunks other workers claimed (not for idle helpers to arrive).
    for (int spins = 0; done_.load(std::memory_order_acquire) < n; ++spins) {
      if (spins < kSpinBeforeSleep) {
        _mm_pause();
      } else {
        std::this_thread::yield();
      }
    }
    // acq_rel: the next job's field stores cannot become visible before the close.
    state_.exchange(pack(gen, kClosed), std::memory_order_acq_rel);
  }

 private:
  // Called before the next job is published: a new helper starts from the current
  // generation, so it takes part in that job.
  void ensure_helpers(int helpers) {
    const uint64_t current = gen_of(state_.load(std::memory_order_acquire));
    while (static_cast<int>(started_) < helpers) {
      const int id = static_cast<int>(++started_);
      std::thread([this, id, current] { helper_loop(id, current); }).detach();
    }
  }

  // Claim and run chunks of the current job until none is left or the job changed.
  void work(int worker) {
    uint64_t s = state_.load(std::memory_order_acquire);
    const uint64_t gen = gen_of(s);
    const RangeFn fn = fn_.load(std::memory_order_relaxed);
    void* const ctx = ctx_.load(std::memory_order_relaxed);
    const int64_t n = n_.load(std::memory_order_relaxed);
    const int64_t grain = grain_.load(std::memory_order_relaxed);
    // The fields above may belong to a newer job than `s`; a claim only succeeds while the
    // state still holds `gen` with an open index, and then they are this job's fields.
    while (gen_of(s) == gen && static_cast<int64_t>(index_of(s)) < n) {
      const int64_t begin = static_cast<int64_t>(index_of(s));
      const int64_t end = std::min(begin + grain, n);
      if (!state_.compare_exchange_weak(s, pack(gen, end), std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        continue;
      }
      fn(ctx, begin, end, worker);
      done_.fetch_add(end - begin, std::memory_order_acq_rel);
      s = state_.load(std::memory_order_acquire);
    }
  }

  // Spin (pause) for up to knob spin_us for a new job, then sleep until one is published or
  // an operator wakes the helpers ahead of its job (wake_helpers), and spin again. Measured
  // side by side (bench-operators task.variants, 2026-11-26 06:14 UTC, load 4.5): spinning
  // 10 ms instead of 100 us made fp16 operators 1.5-3x slower (a spinning helper takes the
  // core that the cache flush, the caller or another process needs on a 2-vCPU VM), and
  // prewake showed no consistent gain: both stay off by default.
  void helper_loop(int id, uint64_t seen) {
    for (;;) {
      uint64_t gen = spin_for_job(seen);
      if (gen == seen) {
        std::unique_lock<std::mutex> lock(mu_);
        const uint64_t woken = wakes_.load(std::memory_order_relaxed);
        cv_.wait(lock, [&] {
          return gen_of(state_.load(std::memory_order_acquire)) != seen ||
                 wakes_.load(std::memory_order_relaxed) != woken;
        });
        gen = gen_of(state_.load(std::memory_order_acquire));
        if (gen == seen) continue;  // woken ahead of a job: spin for it
      }
      seen = gen;
      if (id <= allowed_.load(std::memory_order_relaxed)) work(id);
    }
  }

  // The generation after spinning until it differs from `seen` or spin_us passed (the knob
  // is read at every check, so lowering it stops a helper already spinning).
  uint64_t spin_for_job(uint64_t seen) const {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      for (int i = 0; i < kSpinCheckEvery; ++i) {
        const uint64_t gen = gen_of(state_.load(std::memory_order_acquire));
        if (gen != seen) return gen;
        _mm_pause();
      }
      const auto limit = std::chrono::microseconds(knob(kKnobSpinUs));
      if (std::chrono::steady_clock::now() - start >= limit) return seen;
    }
  }

 public:
  // Wake sleeping helpers now so they are spinning when the next job is published.
  void wake() {
    if (started_.load(std::memory_order_relaxed) == 0) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      wakes_.fetch_add(1, std::memory_order_relaxed);
    }
    cv_.notify_all();
  }

 private:
  std::mutex run_mu_, mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> state_{pack(0, kClosed)};
  std::atomic<int64_t> done_{0};
  std::atomic<RangeFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int64_t> n_{0}, grain_{1};
  std::atomic<int> allowed_{0};
  std::atomic<int> started_{0};
  std::atomic<uint64_t> wakes_{0};
};

}  // namespace

void parallel_for_raw(int64_t n, int64_t grain, int threads, RangeFn fn, void* ctx) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (threads <= 1 || n <= grain) {
    fn(ctx, 0, n, 0);
    return;
  }
  Pool::instance().run(n, grain, threads, fn, ctx);
}

void wake_helpers(int threads) {
  if (threads > 1 && knob(kKnobPrewake)) Pool::instance().wake();
}

int probe_workers(int threads, int chunks, int sleep_us) {
  std::vector<std::atomic<int>> hits(kMaxWorkers);
  for (auto& h : hits) h.store(0);
  parallel_for(chunks, 1, threads, [&](int64_t, int64_t, int worker) {
    hits[worker].fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
  });
  return static_cast<int>(std::count_if(hits.begin(), hits.end(),
                                        [](const std::atomic<int>& h) { return h.load() > 0; }));
}

}  // namespace pbops
