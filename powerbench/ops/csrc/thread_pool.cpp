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
constexpr int kIdleKept = 4;              // a helper's last sleeps that predict the next job

using Clock = std::chrono::steady_clock;

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
  // A helper that sleeps costs the next job dearly on a VM: the caller's futex wake (an IPI
  // to a halted vCPU, ~19 us) and the helper's arrival tens of us later (2026-11-26 09:00
  // UTC, load 1.3, fp16 row 4096x16384 90%: 361 us per call, 271 us with spin_us 10000).
  // So a sleeping helper also wakes by the clock (knob wake_ahead_us) shortly before the
  // next job is due and spins for it. When a job is due is taken from the helper's last
  // kIdleKept sleeps (falling asleep to the job that ended them): calls at a steady pace (a
  // decode loop's steps, the benchmark's flushed calls, where a sparse call and the dense
  // reference alternate, so two gaps alternate) repeat them; the helper tries each of those
  // times in turn, earliest first, and waits for a job that came in none of them asleep.
  // Same-process A/B (bench-operators task.variants, 09:28 UTC, load 1.0-1.2, fp16 b1
  // 4096x16384): wake_ahead_us 200 vs 0 took row 90% from 347 to 270 us (8.6x -> 11.0x
  // dense), 99% from 89 to 42 us, ffn_relu 90% 7.7x -> 9.7x; 1000 was no better overall.
  // Knob wake_ahead_pct widens the window to that percentage of the predicted gap. It
  // looked better in a fixed call order (12:16 UTC: fp16 row 90% 9.2x -> 11.1x dense at
  // 10%), but that order favoured whichever setting did not follow the dense kernel; with
  // each benchmark round in a random order (12:34 UTC) it showed no gain: default 0 (off).
  void helper_loop(int id, uint64_t seen) {
    Clock::duration idle[kIdleKept] = {};  // the last sleeps' lengths (0: none yet)
    int next = 0;
    for (;;) {
      uint64_t gen = spin_for_job(seen, kKnobSpinUs, 1);
      if (gen == seen) {
        const Clock::time_point asleep = Clock::now();
        gen = sleep_for_job(seen, asleep, idle);
        if (gen == seen) continue;  // woken ahead of a job (prewake): spin for it
        idle[next] = Clock::now() - asleep;
        next = (next + 1) % kIdleKept;
      }
      seen = gen;
      if (id <= allowed_.load(std::memory_order_relaxed)) work(id);
    }
  }

  // Sleep until a job after `seen` is published (its generation) or an operator wakes the
  // helpers (`seen`); with knob wake_ahead_us > 0, wake that long before each time
  // `asleep + idle[i]` still ahead, earliest first, and spin up to twice as long for a job.
  uint64_t sleep_for_job(uint64_t seen, Clock::time_point asleep,
                         const Clock::duration (&idle)[kIdleKept]) {
    const Clock::duration ahead_min = std::chrono::microseconds(knob(kKnobWakeAheadUs));
    const int64_t pct = knob(kKnobWakeAheadPct);
    Clock::duration due[kIdleKept];
    std::copy(idle, idle + kIdleKept, due);
    std::sort(due, due + kIdleKept);
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t woken = wakes_.load(std::memory_order_relaxed);
    const auto ready = [&] {
      return gen_of(state_.load(std::memory_order_acquire)) != seen ||
             wakes_.load(std::memory_order_relaxed) != woken;
    };
    for (int i = 0; i < kIdleKept && ahead_min.count() > 0; ++i) {
      // the window: wake_ahead_us, or wake_ahead_pct of the predicted gap if longer
      const Clock::duration ahead = std::max(ahead_min, due[i] * pct / 100);
      const Clock::time_point wake_at = asleep + due[i] - ahead;
      if (due[i].count() == 0 || wake_at <= Clock::now()) continue;
      if (cv_.wait_until(lock, wake_at, ready)) break;
      lock.unlock();
      const uint64_t gen = spin_for_job(seen, 2 * ahead);
      lock.lock();
      if (gen != seen) return gen;
    }
    cv_.wait(lock, ready);
    return gen_of(state_.load(std::memory_order_acquire));
  }

  // The generation after spinning until it differs from `seen` or `stop(time spent)` holds.
  template <typename Stop>
  uint64_t spin_until(uint64_t seen, Stop stop) const {
    const auto start = Clock::now();
    for (;;) {
      for (int i = 0; i < kSpinCheckEvery; ++i) {
        const uint64_t gen = gen_of(state_.load(std::memory_order_acquire));
        if (gen != seen) return gen;
        _mm_pause();
      }
      if (stop(Clock::now() - start)) return seen;
    }
  }

  // ... for `factor` times the knob's us (the knob is read at every check, so lowering it
  // stops a spinning helper).
  uint64_t spin_for_job(uint64_t seen, Knob limit_us, int factor) const {
    return spin_until(seen, [&](Clock::duration spent) {
      return spent >= std::chrono::microseconds(knob(limit_us) * factor);
    });
  }

  // ... for `limit`, unless knob wake_ahead_us drops to 0 (stops the spin).
  uint64_t spin_for_job(uint64_t seen, Clock::duration limit) const {
    return spin_until(seen, [&](Clock::duration spent) {
      return spent >= limit || knob(kKnobWakeAheadUs) == 0;
    });
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
