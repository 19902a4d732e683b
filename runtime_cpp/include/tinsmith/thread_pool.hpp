// The host's worker threads, for models built with more than one thread (`threads=N`).
//
// One pool per process, shared by every model: up to kMaxWorkers threads in static storage,
// started once (by a model's init_ws() or set_threads(), never by call()) and kept until the
// process ends. run(task, context, n) calls task(context, part, n) once for every part 0..n-1 and
// returns when all have returned: the barrier between a model's clusters. Parts are claimed one at
// a time by the calling thread and by the workers, whichever comes first, so a worker the system
// has not scheduled yet never holds the caller up; which thread runs a part never changes a result
// (generated code gives every output element to exactly one part and computes it the same way for
// any thread count). Nothing here allocates after the threads exist, throws or uses RTTI.
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

// The current run as one word: its number (32 bits), its parts (16) and the next part to claim
// (16). Claiming a part is a compare-and-swap on it, which fails once a newer run has begun.
inline std::uint64_t ticket(std::uint32_t run, int parts, int next) noexcept {
  return (std::uint64_t{run} << 32) | (static_cast<std::uint64_t>(parts) << 16) | static_cast<std::uint64_t>(next);
}
inline std::uint32_t run_of(std::uint64_t t) noexcept { return static_cast<std::uint32_t>(t >> 32); }
inline int parts_of(std::uint64_t t) noexcept { return static_cast<int>((t >> 16) & 0xffff); }
inline int next_of(std::uint64_t t) noexcept { return static_cast<int>(t & 0xffff); }

struct State {
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
  pthread_t threads[kMaxWorkers];
  std::atomic<int> started{0};    // workers running
  std::atomic<bool> busy{false};  // a run() is in progress
  std::atomic<int> sleepers{0};
  std::uint32_t runs = 0;         // runs begun (written by the thread holding `busy`)
  // Written by run() before it publishes the ticket, and only while no part is claimed or running:
  // a claim (a successful compare-and-swap) orders them before the claimer's reads.
  Task task = nullptr;
  void* context = nullptr;
  alignas(64) std::atomic<std::uint64_t> ticket{0};
  alignas(64) std::atomic<int> done{0};  // parts of the current run finished
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

// Pauses before a worker sleeps (some hundred microseconds), and before a caller waiting for the
// last parts yields its core to them (some microseconds: they may be waiting for it).
constexpr int kSpins = 4000;
constexpr int kWaitSpins = 100;

// Runs parts of run `run` until none is left to claim.
inline void work(State& s, std::uint32_t run) noexcept {
  std::uint64_t t = s.ticket.load(std::memory_order_acquire);
  while (run_of(t) == run && next_of(t) < parts_of(t)) {
    if (!s.ticket.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    s.task(s.context, next_of(t), parts_of(t));
    s.done.fetch_add(1, std::memory_order_release);
    t = s.ticket.load(std::memory_order_acquire);
  }
}

inline void* worker(void*) noexcept {
  State& s = state();
  std::uint32_t seen = run_of(s.ticket.load(std::memory_order_acquire));
  for (;;) {
    std::uint32_t now = run_of(s.ticket.load(std::memory_order_acquire));
    for (int i = 0; now == seen && i < kSpins; ++i) {
      relax();
      now = run_of(s.ticket.load(std::memory_order_acquire));
    }
    if (now == seen) {
      pthread_mutex_lock(&s.mutex);
      s.sleepers.fetch_add(1, std::memory_order_seq_cst);
      while ((now = run_of(s.ticket.load(std::memory_order_seq_cst))) == seen) pthread_cond_wait(&s.wake, &s.mutex);
      s.sleepers.fetch_sub(1, std::memory_order_relaxed);
      pthread_mutex_unlock(&s.mutex);
    }
    seen = now;
    work(s, now);
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
    if (pthread_create(&s.threads[started], nullptr, detail::worker, nullptr) != 0) break;
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
  s.task = task;
  s.context = context;
  s.done.store(0, std::memory_order_relaxed);
  s.ticket.store(detail::ticket(run, parts, 0), std::memory_order_seq_cst);  // publishes task and context
  if (s.sleepers.load(std::memory_order_seq_cst) > 0) {
    pthread_mutex_lock(&s.mutex);
    pthread_cond_broadcast(&s.wake);
    pthread_mutex_unlock(&s.mutex);
  }
  detail::work(s, run);
  for (int i = 0; s.done.load(std::memory_order_acquire) < parts; ++i) {
    if (i < detail::kWaitSpins) detail::relax();
    else sched_yield();
  }
  s.busy.store(false, std::memory_order_release);
}

}  // namespace pool
}  // namespace tinsmith
