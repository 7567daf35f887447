// cpu_world.cpp — the in-process communicator: `size` ranks in one process, one thread each.
//
// Everything goes through one mutex and one condition variable of the shared State (a world has
// at most a handful of ranks; the data itself is copied outside the lock):
//   barrier        a generation counter;
//   all_reduce_sum every rank posts its buffer, a barrier, rank r sums slice r of every buffer in
//                  rank order (f32) and writes it back to every buffer, a barrier (so no rank
//                  returns, or reuses its buffer, while another still reads or writes it);
//   send_recv      the sender copies into a mailbox (src, dst), then receives from its own
//                  source, then waits until its message was taken: it returns when both sides
//                  are done, as NCCL's grouped send/recv completes (so a peer that is gone fails
//                  its sender too, not only its receiver). Posting before receiving keeps a ring
//                  of send_recv calls free of deadlock.
// Every wait ends at the deadline (CommOptions::timeout) or when the world is aborted. A wait
// that times out aborts the world, so a rank that died or stopped calling turns into an Error on
// every rank: the ones waiting for it time out, and the rest see the abort at their next call.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "common/dtype.hpp"
#include "distributed/comm_common.hpp"

namespace fastattn::distributed {

struct CpuWorld::State {
  int size = 0;
  CommOptions options;

  std::mutex mu;
  std::condition_variable cv;
  bool aborted = false;
  std::string reason;

  std::int64_t arrived = 0;     // ranks in the current barrier
  std::int64_t generation = 0;  // barriers completed

  struct Slot {
    void* data = nullptr;
    std::int64_t numel = 0;
    DType dtype = DType::f32;
  };
  std::vector<Slot> slots;  // all_reduce_sum: each rank's buffer
  std::vector<std::deque<std::vector<std::uint8_t>>> mailboxes;  // [src * size + dst]
  std::vector<std::int64_t> sent, taken;  // [src * size + dst]: messages posted, messages received

  void abort_locked(const std::string& why) {
    if (!aborted) {
      aborted = true;
      reason = why;
    }
    cv.notify_all();
  }
};

namespace {

using Clock = std::chrono::steady_clock;

template <typename Load, typename Store>
void reduce_slice(const std::vector<CpuWorld::State::Slot>& slots, std::int64_t begin, std::int64_t end,
                  Load load, Store store) {
  // acc: (end - begin) f32, the sum in rank order (the same order, hence bits, on every rank).
  std::vector<float> acc(static_cast<std::size_t>(end - begin), 0.0f);
  for (const CpuWorld::State::Slot& s : slots)
    for (std::int64_t i = begin; i < end; ++i) acc[static_cast<std::size_t>(i - begin)] += load(s.data, i);
  for (const CpuWorld::State::Slot& s : slots)
    for (std::int64_t i = begin; i < end; ++i) store(s.data, i, acc[static_cast<std::size_t>(i - begin)]);
}

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(std::shared_ptr<CpuWorld::State> state, int rank) : s_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return s_->size; }
  Device device() const override { return Device::cpu(); }
  const char* backend_name() const override { return "cpu-threads"; }

  void barrier() override { wait_barrier("barrier"); }
  void synchronize(void*) override {}

  void abort(const std::string& reason) noexcept override {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->abort_locked("rank " + std::to_string(rank_) + " aborted: " + reason);
  }
  bool aborted() const noexcept override {
    std::lock_guard<std::mutex> lock(s_->mu);
    return s_->aborted;
  }

  void all_reduce_sum(const TensorView& buffer, void*) override {
    check_reduce_buffer(buffer, device(), "all_reduce_sum: buffer");
    if (size() == 1) {  // nothing to sum, nobody to wait for
      std::unique_lock<std::mutex> lock(s_->mu);
      throw_if_aborted(lock, "all_reduce_sum");
      return;
    }
    {
      std::unique_lock<std::mutex> lock(s_->mu);
      throw_if_aborted(lock, "all_reduce_sum");
      s_->slots[static_cast<std::size_t>(rank_)] = {buffer.data, buffer.numel(), buffer.dtype};
    }
    wait_barrier("all_reduce_sum");
    // Every rank sees every slot (the barrier orders the posts before these reads); all reach
    // the same verdict on a mismatch, so all throw.
    const std::vector<CpuWorld::State::Slot> slots = s_->slots;
    for (int r = 0; r < size(); ++r) {
      const CpuWorld::State::Slot& s = slots[static_cast<std::size_t>(r)];
      if (s.numel != buffer.numel() || s.dtype != buffer.dtype) {
        abort("all_reduce_sum buffers differ between ranks");
        throw Error(ErrorCode::invalid_argument,
                    "all_reduce_sum: buffer: expected the same size and dtype on every rank, got " +
                        std::to_string(buffer.numel()) + " " + to_string(buffer.dtype) + " on rank " +
                        std::to_string(rank_) + " and " + std::to_string(s.numel) + " " + to_string(s.dtype) +
                        " on rank " + std::to_string(r));
      }
    }
    const std::int64_t n = buffer.numel(), begin = n * rank_ / size(), end = n * (rank_ + 1) / size();
    switch (buffer.dtype) {
      case DType::f32:
        reduce_slice(
            slots, begin, end, [](void* p, std::int64_t i) { return static_cast<float*>(p)[i]; },
            [](void* p, std::int64_t i, float x) { static_cast<float*>(p)[i] = x; });
        break;
      case DType::bf16:
        reduce_slice(
            slots, begin, end, [](void* p, std::int64_t i) { return bf16_to_float(static_cast<std::uint16_t*>(p)[i]); },
            [](void* p, std::int64_t i, float x) { static_cast<std::uint16_t*>(p)[i] = float_to_bf16(x); });
        break;
      default:
        reduce_slice(
            slots, begin, end, [](void* p, std::int64_t i) { return f16_to_float(static_cast<std::uint16_t*>(p)[i]); },
            [](void* p, std::int64_t i, float x) { static_cast<std::uint16_t*>(p)[i] = float_to_f16(x); });
        break;
    }
    wait_barrier("all_reduce_sum");
  }

  void send_recv(const TensorView& send, int dst, const TensorView& recv, int src, void*) override {
    check_message_buffer(send, device(), "send_recv: send");
    check_message_buffer(recv, device(), "send_recv: recv");
    check_peer(dst, size(), "send_recv: dst");
    check_peer(src, size(), "send_recv: src");
    const std::size_t n = view_bytes(send);
    std::vector<std::uint8_t> message(n);
    if (n) std::memcpy(message.data(), send.data, n);
    std::unique_lock<std::mutex> lock(s_->mu);
    throw_if_aborted(lock, "send_recv");
    const std::size_t out_box = static_cast<std::size_t>(rank_ * size() + dst), in_box = static_cast<std::size_t>(src * size() + rank_);
    s_->mailboxes[out_box].push_back(std::move(message));
    const std::int64_t sequence = ++s_->sent[out_box];
    s_->cv.notify_all();
    auto& box = s_->mailboxes[in_box];
    wait_until(lock, [&] { return !box.empty(); }, "send_recv (receiving from rank " + std::to_string(src) + ")");
    std::vector<std::uint8_t> got = std::move(box.front());
    box.pop_front();
    ++s_->taken[in_box];
    s_->cv.notify_all();
    wait_until(lock, [&] { return s_->taken[out_box] >= sequence; },
               "send_recv (sending to rank " + std::to_string(dst) + ")");
    lock.unlock();
    if (got.size() != view_bytes(recv)) {
      abort("send_recv message sizes differ");
      throw Error(ErrorCode::invalid_argument, "send_recv: recv: expected " + std::to_string(got.size()) +
                                                   " bytes (what rank " + std::to_string(src) + " sent), got " +
                                                   std::to_string(view_bytes(recv)));
    }
    if (!got.empty()) std::memcpy(recv.data, got.data(), got.size());
  }

 private:
  [[noreturn]] void fail_aborted(const std::string& what) {
    fail_comm(rank_, size(), what + " failed: the group was aborted (" + s_->reason + ")");
  }
  void throw_if_aborted(std::unique_lock<std::mutex>&, const std::string& what) {
    if (s_->aborted) fail_aborted(what);
  }
  // Waits (lock held) until done(), an abort, or the deadline; the last two throw, a timeout
  // after aborting the world.
  template <typename Done>
  void wait_until(std::unique_lock<std::mutex>& lock, Done done, const std::string& what) {
    const auto deadline = Clock::now() + s_->options.timeout;
    while (!done()) {
      if (s_->aborted) fail_aborted(what);
      if (s_->cv.wait_until(lock, deadline) == std::cv_status::timeout && !done() && !s_->aborted) {
        const std::string why = "rank " + std::to_string(rank_) + " timed out after " +
                                format_ms(s_->options.timeout) + " in " + what;
        s_->abort_locked(why);
        fail_comm(rank_, size(), what + " failed: " + why + " (a peer died or stopped calling)");
      }
    }
  }
  void wait_barrier(const std::string& what) {
    std::unique_lock<std::mutex> lock(s_->mu);
    throw_if_aborted(lock, what);
    const std::int64_t generation = s_->generation;
    if (++s_->arrived == s_->size) {
      s_->arrived = 0;
      ++s_->generation;
      s_->cv.notify_all();
      return;
    }
    wait_until(lock, [&] { return s_->generation != generation; }, what);
  }

  std::shared_ptr<CpuWorld::State> s_;
  int rank_;
};

}  // namespace

CpuWorld::CpuWorld(int size, const CommOptions& options) : state_(std::make_shared<State>()) {
  if (size < 1) throw Error(ErrorCode::invalid_argument, "CpuWorld: size: expected >= 1, got " + std::to_string(size));
  if (options.timeout.count() <= 0)
    throw Error(ErrorCode::invalid_argument,
                "CpuWorld: options.timeout: expected > 0 ms, got " + std::to_string(options.timeout.count()));
  state_->size = size;
  state_->options = options;
  state_->slots.resize(static_cast<std::size_t>(size));
  state_->mailboxes.resize(static_cast<std::size_t>(size) * static_cast<std::size_t>(size));
  state_->sent.assign(state_->mailboxes.size(), 0);
  state_->taken.assign(state_->mailboxes.size(), 0);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<CpuCommunicator>(state_, r));
}

CpuWorld::~CpuWorld() = default;

int CpuWorld::size() const { return state_->size; }

Communicator& CpuWorld::communicator(int rank) {
  check_peer(rank, size(), "CpuWorld::communicator: rank");
  return *ranks_[static_cast<std::size_t>(rank)];
}

void CpuWorld::abort(const std::string& reason) noexcept {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->abort_locked(reason);
}

std::vector<std::exception_ptr> CpuWorld::run(const std::function<void(Communicator&)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size()));
  std::vector<std::thread> threads;
  threads.reserve(errors.size());
  for (int r = 0; r < size(); ++r) {
    threads.emplace_back([this, r, &fn, &errors] {
      try {
        fn(communicator(r));
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        std::string what = "an exception that is not std::exception";
        try {
          throw;
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        communicator(r).abort("its thread threw: " + what);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

}  // namespace fastattn::distributed
