// A small work-claiming thread pool for the CPU kernels.
//
// Why not `#pragma omp parallel for`: an OpenMP region ends in a barrier that every team
// thread must reach, so when the OS has preempted one thread (a shared or oversubscribed
// machine) each region waits a scheduler time slice (measured: median 0.2 ms, p90 15 ms for
// a 2.6 MB row op on the shared 2-core box). Here the calling thread starts on the work at
// once and helpers claim chunks from an atomic counter when they get CPU time; the caller
// waits only for chunks that were actually claimed, never for a helper to show up. A
// process that forks keeps working too (the child simply runs everything on the caller).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cpu_knobs.h"

namespace pbops {

// fn(ctx, begin, end, worker) over [0, n) in chunks of `grain`; worker 0 is the caller,
// 1..threads-1 the helpers (at most `threads` workers take part).
using RangeFn = void (*)(void* ctx, int64_t begin, int64_t end, int worker);

void parallel_for_raw(int64_t n, int64_t grain, int threads, RangeFn fn, void* ctx);

template <typename F>
inline void parallel_for(int64_t n, int64_t grain, int threads, F&& f) {
  using Fn = std::remove_reference_t<F>;
  parallel_for_raw(
      n, grain, threads,
      [](void* ctx, int64_t b, int64_t e, int w) { (*static_cast<Fn*>(ctx))(b, e, w); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

// With knob prewake on and threads > 1: wake the sleeping helpers now, so that they spin
// for the job an operator publishes after its setup instead of waking up (tens of µs on a
// VM) after the caller started on it.
void wake_helpers(int threads);

// Upper bound on worker ids (scratch arrays are sized with it).
constexpr int kMaxWorkers = 256;

// Distinct workers that ran chunks of a job of `chunks` chunks, each sleeping `sleep_us`
// (tests the thread count; not used by the kernels).
int probe_workers(int threads, int chunks, int sleep_us);

}  // namespace pbops
