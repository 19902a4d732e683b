// The host's worker threads, for models built with more than one thread (`threads=N`).
//
// One pool per process, shared by every model: up to kMaxWorkers threads in static storage,
// started once (by a model's init_ws() or set_threads(), never by call()) and kept until the
// process ends. run(task, context, n) calls task(context, part, n) once for every part 0..n-1 and
// returns when all have returned: the barrier between a model's clusters. Which thread runs a part
// never changes a result (generated code gives every output element to exactly one part and
// computes it the same way for any thread count). Nothing here allocates after the threads exist,
// throws or uses RTTI.
//
// Who runs which part: the parts are cut into one range of consecutive parts per thread, the
// caller's first, and each thread runs its own range front to back; a thread that has finished
// takes parts from the back of the others' ranges. Generated code cuts every kernel's outputs in
// the same order (rows, or pixels, first), so with the threads on time each computes the same
// share of every layer, and reads what it wrote the layer before from its own cache: moving those
// lines between cores cost more than the split saved (docs/KERNELS.md, section 9). A worker the
// system has not scheduled yet never holds the caller up: its range is taken over. Each range's
// claims are compare-and-swaps on a word of its own, so threads on time never share a written
// cache line while they work, and each adds its finished parts to the count once per run.
//
// Waiting: a worker spins for a while after a run (a model's next cluster comes within
// microseconds), then sleeps on a condition variable until a run wakes it. A run started while
// another thread is using the pool runs all its parts on its own thread.
// Hosted POSIX systems only: firmware targets never include this header.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdint>

namespace tinsmith {
namespace pool {

using Task = void (*)(void* context, int part, int parts);

constexpr int kMaxWorkers = 63;  // threads besides the caller's; models ask for at most 64

// Parts a split kernel is cut into for `threads` threads: more parts than threads, so that the
// threads that are running take over the parts of one the system has set aside.
inline int parts_for(int threads) noexcept { return threads > 1 ? 4 * threads : 1; }

namespace detail {

// A thread's range of the current run's parts as one word: the run's number (32 bits), the next
// part to claim from the front (16) and one past the last unclaimed part (16). Claiming a part is a
// compare-and-swap on it, which fails once a newer run has begun.
inline std::uint64_t range(std::uint32_t run, int next, int end) noexcept {
  return (std::uint64_t{run} << 32) | (static_cast<std::uint64_t>(next) << 16) | static_cast<std::uint64_t>(end);
}
inline std::uint32_t run_of(std::uint64_t r) noexcept { return static_cast<std::uint32_t>(r >> 32); }
inline int next_of(std::uint64_t r) noexcept { return static_cast<int>((r >> 16) & 0xffff); }
inline int end_of(std::uint64_t r) noexcept { return static_cast<int>(r & 0xffff); }

struct alignas(64) Range {
  std::atomic<std::uint64_t> word{0};
};

struct State {
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
  pthread_t threads[kMaxWorkers];
  std::atomic<int> started{0};    // workers running
  std::atomic<bool> busy{false};  // a run() is in progress
  std::atomic<int> sleepers{0};
  std::uint32_t runs = 0;         // runs begun (written by the thread holding `busy`)
  // Written by run() before it publishes the run's number, and only while no part is claimed or
  // running: a worker reads them after it has seen the number.
  Task task = nullptr;
  void* context = nullptr;
  int parts = 0;
  std::atomic<int> ranges{0};  // read by workers still looking for parts of an older run, too
  alignas(64) std::atomic<std::uint32_t> current{0};  // the number of the latest run
  alignas(64) std::atomic<int> done{0};               // parts of the current run finished
  Range range[kMaxWorkers + 1];                       // the caller's, then worker i's at i
};

inline State& state() noexcept {
  static State s;
  return s;
}

inline void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield");
#endif
}

// Pauses before a worker sleeps (some hundred microseconds: waking a sleeping thread took 6 to 12
// microseconds on the benchmark machine), and before a caller waiting for the last parts yields its
// core to them (some microseconds: they may be waiting for it).
constexpr int kSpins = 4000;
constexpr int kWaitSpins = 100;

// Runs parts of run `run` until none is left to claim: thread `self`'s own range from the front,
// then the others' from the back.
inline void work(State& s, std::uint32_t run, int self) noexcept {
  const int ranges = s.ranges.load(std::memory_order_relaxed);
  int finished = 0;
  for (int k = 0; k < ranges; ++k) {
    const bool own = k == 0 && self < ranges;
    Range& r = s.range[(self + k) % ranges];
    std::uint64_t w = r.word.load(std::memory_order_acquire);
    while (run_of(w) == run && next_of(w) < end_of(w)) {
      const std::uint64_t claimed = own ? w + (std::uint64_t{1} << 16) : w - 1;
      if (!r.word.compare_exchange_weak(w, claimed, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      s.task(s.context, own ? next_of(w) : end_of(w) - 1, s.parts);
      ++finished;
      w = r.word.load(std::memory_order_acquire);
    }
  }
  if (finished) s.done.fetch_add(finished, std::memory_order_release);
}

inline void* worker(void* index) noexcept {
  State& s = state();
  const int self = static_cast<int>(reinterpret_cast<std::intptr_t>(index));
  std::uint32_t seen = s.current.load(std::memory_order_acquire);
  for (;;) {
    std::uint32_t now = s.current.load(std::memory_order_acquire);
    for (int i = 0; now == seen && i < kSpins; ++i) {
      relax();
      now = s.current.load(std::memory_order_acquire);
    }
    if (now == seen) {
      pthread_mutex_lock(&s.mutex);
      s.sleepers.fetch_add(1, std::memory_order_seq_cst);
      while ((now = s.current.load(std::memory_order_seq_cst)) == seen) pthread_cond_wait(&s.wake, &s.mutex);
      s.sleepers.fetch_sub(1, std::memory_order_relaxed);
      pthread_mutex_unlock(&s.mutex);
    }
    seen = now;
    work(s, now, self);
  }
  return nullptr;
}

}  // namespace detail

// Starts workers until `threads` threads (the caller's included) can run parts; returns how many
// can (fewer when the system refuses a thread). Call it outside call(): it may allocate stacks.
inline int reserve(int threads) noexcept {
  detail::State& s = detail::state();
  if (threads > kMaxWorkers + 1) threads = kMaxWorkers + 1;
  pthread_mutex_lock(&s.mutex);
  int started = s.started.load(std::memory_order_relaxed);
  while (started + 1 < threads) {
    void* index = reinterpret_cast<void*>(static_cast<std::intptr_t>(started + 1));
    if (pthread_create(&s.threads[started], nullptr, detail::worker, index) != 0) break;
    pthread_detach(s.threads[started]);
    s.started.store(++started, std::memory_order_release);
  }
  pthread_mutex_unlock(&s.mutex);
  return started + 1 < threads ? started + 1 : threads;
}

// task(context, part, parts) for every part; returns when all have returned.
inline void run(Task task, void* context, int parts) noexcept {
  detail::State& s = detail::state();
  bool idle = false;
  if (parts <= 1 || s.started.load(std::memory_order_acquire) == 0 ||
      !s.busy.compare_exchange_strong(idle, true, std::memory_order_acquire)) {
    for (int part = 0; part < parts; ++part) task(context, part, parts);
    return;
  }
  const std::uint32_t run = ++s.runs;
  const int workers = s.started.load(std::memory_order_acquire);
  const int ranges = workers + 1 < parts ? workers + 1 : parts;
  s.task = task;
  s.context = context;
  s.parts = parts;
  s.ranges.store(ranges, std::memory_order_relaxed);
  for (int t = 0; t < ranges; ++t) {
    s.range[t].word.store(detail::range(run, parts * t / ranges, parts * (t + 1) / ranges), std::memory_order_relaxed);
  }
  s.done.store(0, std::memory_order_relaxed);
  s.current.store(run, std::memory_order_seq_cst);  // publishes the run's fields and ranges
  if (s.sleepers.load(std::memory_order_seq_cst) > 0) {
    pthread_mutex_lock(&s.mutex);
    pthread_cond_broadcast(&s.wake);
    pthread_mutex_unlock(&s.mutex);
  }
  detail::work(s, run, 0);
  for (int i = 0; s.done.load(std::memory_order_acquire) < parts; ++i) {
    if (i < detail::kWaitSpins) detail::relax();
    else sched_yield();
  }
  s.busy.store(false, std::memory_order_release);
}

}  // namespace pool
}  // namespace tinsmith
