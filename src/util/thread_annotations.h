// Clang thread-safety annotations and an annotated mutex.
//
// The macros state lock contracts that clang checks at compile time with -Wthread-safety (the
// build-clang/ tree of scripts/test.sh turns its warnings into errors); other compilers see
// nothing. libstdc++'s std::mutex carries no annotations, so guarded state uses Mutex, MutexLock
// and CondVar below instead:
//
//   Mutex mu_;
//   CondVar cv_;
//   size_t pending_ GUARDED_BY(mu_) = 0;
//   void DrainLocked() REQUIRES(mu_);
//   ...
//   MutexLock lock(mu_);
//   while (pending_ != 0) cv_.Wait(mu_);
//
// Condition-variable waits are written as loops over the predicate rather than with a predicate
// lambda: the analysis checks a lambda's body as a function of its own, without the lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define FC_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define FC_THREAD_ANNOTATION(x)
#endif

// On a class: its objects are capabilities (locks) of the given kind ("mutex").
#define CAPABILITY(x) FC_THREAD_ANNOTATION(capability(x))
// On a class: an RAII object that holds a capability from construction to destruction.
#define SCOPED_CAPABILITY FC_THREAD_ANNOTATION(scoped_lockable)
// On a member: read and written only with the capability held.
#define GUARDED_BY(x) FC_THREAD_ANNOTATION(guarded_by(x))
// On a pointer member: the pointee is accessed only with the capability held.
#define PT_GUARDED_BY(x) FC_THREAD_ANNOTATION(pt_guarded_by(x))
// On a capability member: the lock order relative to other capabilities.
#define ACQUIRED_BEFORE(...) FC_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) FC_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
// On a function: the caller must hold (exclusively / shared) the capabilities.
#define REQUIRES(...) FC_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) FC_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
// On a function: it acquires / releases the capabilities (no argument: `this`).
#define ACQUIRE(...) FC_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) FC_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) FC_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) FC_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
// On a scoped guard's destructor: releases whichever kind (exclusive or shared) it holds.
#define RELEASE_GENERIC(...) FC_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
// On a function returning bool: it acquires the capability when it returns the given value.
#define TRY_ACQUIRE(...) FC_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// On a function: the caller must not hold the capabilities (it acquires them itself).
#define EXCLUDES(...) FC_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a function: asserts, at run time or by contract, that the capability is held.
#define ASSERT_CAPABILITY(x) FC_THREAD_ANNOTATION(assert_capability(x))
// On a function: it returns a reference to the given capability.
#define RETURN_CAPABILITY(x) FC_THREAD_ANNOTATION(lock_returned(x))
// On a function: the analysis skips it. Say why wherever it is used.
#define NO_THREAD_SAFETY_ANALYSIS FC_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace flatcake {

// std::mutex with annotations. lock / unlock / try_lock keep the BasicLockable / Lockable names,
// so std::scoped_lock and std::condition_variable_any accept it too.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its lifetime. Unlock / Lock let a holder drop the lock around a call that
// must not run under it (an I/O submission, a callback) and take it back.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_.lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// std::shared_mutex with annotations: exclusive (lock / unlock) and shared (lock_shared /
// unlock_shared) holders; the names are those of Lockable / SharedLockable.
class CAPABILITY("mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  void lock_shared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a SharedMutex shared for its lifetime.
class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderLock() RELEASE_GENERIC() { mu_.unlock_shared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Holds a SharedMutex exclusively for its lifetime.
class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterLock() RELEASE() { mu_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

// std::condition_variable for a Mutex. Every wait may wake spuriously: call it in a loop that
// re-checks the condition.
class CondVar {
 public:
  // Releases `mu`, blocks until notified, and takes `mu` again before returning.
  void Wait(Mutex& mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // `mu` stays held, as the caller's lock says
  }
  // Like Wait, but returns false once `deadline` has passed.
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex& mu, const std::chrono::time_point<Clock, Duration>& deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool notified = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return notified;
  }
  // Like Wait, but returns false once `timeout` has passed.
  template <typename Rep, typename Period>
  bool WaitFor(Mutex& mu, const std::chrono::duration<Rep, Period>& timeout) REQUIRES(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout);
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace flatcake
