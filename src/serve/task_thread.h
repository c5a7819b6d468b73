// TaskThread: one thread that runs posted tasks in the order they were posted. RemoteStore runs a
// restore's data half on it when no caller waits to run it, and the completion of its SSD reads
// (which the I/O workers must not run: it sends on the socket). Thread-safe; the destructor runs
// what is queued, then joins.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <utility>

#include "util/thread_annotations.h"

namespace flatcake::serve {

class TaskThread {
 public:
  TaskThread() : thread_([this] { Loop(); }) {}
  ~TaskThread() {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.NotifyAll();
    thread_.join();
  }
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  void Post(std::function<void()> task) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.NotifyOne();
  }

 private:
  void Loop() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    for (;;) {
      while (tasks_.empty() && !stop_) cv_.Wait(mu_);
      if (tasks_.empty()) return;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.Unlock();
      task();
      task = nullptr;  // what it holds goes here, not under the lock
      lock.Lock();
    }
  }

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace flatcake::serve
