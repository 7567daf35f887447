// fastattn/distributed.hpp — attention over several ranks: a communicator interface, the
// tiling-AllReduce of a tensor-parallel output projection, and ring attention (context
// parallelism). Design and status: docs/distributed.md.
//
// Built when CMake's FASTATTN_DISTRIBUTED is ON (the default); the NCCL communicator and the
// CUDA tiling-AllReduce only when FASTATTN_NCCL found nccl.h and libnccl (else their entry
// points throw ErrorCode::unsupported). Every communication failure (a peer that aborted, a
// peer that stopped answering, a timeout, an NCCL error) is a fastattn::Error with
// ErrorCode::device_error and a message starting "distributed:", raised on every rank within
// CommOptions::timeout; no call waits forever.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fastattn/error.hpp"
#include "fastattn/options.hpp"
#include "fastattn/tensor.hpp"

namespace fastattn::distributed {

struct CommOptions {
  // Longest wait of one call for its peers. Past it, the communicator aborts (every rank's
  // pending and later calls fail) and the call throws.
  std::chrono::milliseconds timeout{60'000};
};

// One rank's handle on a group of `size()` ranks. Calls are collective: every rank makes the
// same calls in the same order (send_recv pairs each send with the peer's receive). One thread
// per rank uses a communicator at a time; it is not itself thread-safe.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Device device() const = 0;      // where its buffers live
  virtual const char* backend_name() const = 0;  // "cpu-threads", "nccl"

  // buffer <- sum over ranks of buffer. Contiguous, f32 / f16 / bf16 on device(), the same shape
  // and dtype on every rank. 16-bit values are summed in f32 and rounded once. CPU: the sum runs
  // in rank order, so every rank gets bitwise the same values.
  // GPU communicators enqueue on `stream` (cudaStream_t; nullptr: the default stream) and
  // return; synchronize() waits. CPU communicators ignore it and return when done.
  virtual void all_reduce_sum(const TensorView& buffer, void* stream = nullptr) = 0;

  // Sends `send` to rank `dst` and receives `recv` from rank `src` (the peers' matching call:
  // rank dst receives from this rank a view of the same byte size). Contiguous views of any
  // dtype; either may be empty (0 elements: nothing travels). dst == src == rank() copies.
  virtual void send_recv(const TensorView& send, int dst, const TensorView& recv, int src,
                         void* stream = nullptr) = 0;

  // Returns when every rank has entered it.
  virtual void barrier() = 0;

  // Waits for the calls enqueued on `stream`, under the timeout and failure policy. CPU: no-op.
  virtual void synchronize(void* stream = nullptr) = 0;

  // Fails the whole group: every rank's pending and later calls throw (CPU: at once; NCCL:
  // this rank's ncclCommAbort, the others at their next error poll or timeout). Idempotent.
  virtual void abort(const std::string& reason) noexcept = 0;
  virtual bool aborted() const noexcept = 0;
};

// send to rank + shift, receive from rank - shift (mod size): one step of a ring.
void ring_shift(Communicator& comm, const TensorView& send, const TensorView& recv, int shift = 1,
                void* stream = nullptr);

// ---- in-process CPU ranks ------------------------------------------------------------------
// A group of `size` ranks inside one process, each driven by its own thread: what the tests and
// the CPU benchmark use (1-8 ranks on a 2-core machine). The messages are memory copies.
class CpuWorld {
 public:
  explicit CpuWorld(int size, const CommOptions& options = {});
  ~CpuWorld();
  CpuWorld(const CpuWorld&) = delete;
  CpuWorld& operator=(const CpuWorld&) = delete;

  int size() const;
  // Rank r's communicator (owned by the world; valid while it lives).
  Communicator& communicator(int rank);
  // Fails the group, as Communicator::abort.
  void abort(const std::string& reason) noexcept;

  // Runs fn(communicator(r)) on `size` threads and returns when all have returned. A rank whose
  // fn throws aborts the world, so the others fail fast instead of waiting for it. Returns each
  // rank's exception (null where fn returned).
  std::vector<std::exception_ptr> run(const std::function<void(Communicator&)>& fn);

  struct State;  // shared by the ranks' communicators (src/distributed/cpu_world.cpp)

 private:
  std::shared_ptr<State> state_;
  std::vector<std::unique_ptr<Communicator>> ranks_;
};

// ---- NCCL -----------------------------------------------------------------------------------
// Whether this build has the NCCL communicator (CMake FASTATTN_NCCL).
bool nccl_compiled() noexcept;

struct NcclUniqueId {
  std::array<char, 128> bytes{};  // ncclUniqueId, for the caller to send to every rank
};
// Rank 0 calls this and distributes the id (MPI, a file, a TCP store: the caller's choice).
NcclUniqueId nccl_unique_id();

struct NcclOptions {
  CommOptions comm;
  // ncclConfig_t::CTAPolicy: NCCL_CTA_POLICY_EFFICIENCY (1) leaves more SMs to the GEMM that
  // overlaps the all-reduce; -1: NCCL's default.
  int cta_policy = -1;
  int max_ctas = -1;  // ncclConfig_t::maxCTAs; -1: NCCL's default
};
// One rank of an NCCL group on CUDA device `device` (one rank per GPU: NCCL refuses two ranks on
// one GPU). Sets NCCL_NVLS_ENABLE=0 unless the environment already sets it (NVLink multicast is
// never used), initialises non-blocking and polls with the timeout, so a peer that never joins
// fails the call instead of hanging it.
std::unique_ptr<Communicator> make_nccl_communicator(const NcclUniqueId& id, int rank, int size,
                                                     int device, const NcclOptions& options = {});

// ---- tiling-AllReduce -------------------------------------------------------------------------
// Tensor parallelism splits the attention output's features over ranks: out = sum over ranks of
// attn_out_r @ w_o_r. Cut into row tiles, each tile's all-reduce runs while later tiles compute
// (FastAttention's tiling-AllReduce; FlashOverlap, FLUX: docs/distributed.md).
struct TilingAllReduceOptions {
  std::int64_t tile_rows = 0;  // rows per tile; 0: chosen (the report says how)
  bool overlap = true;         // false: compute every tile, then reduce them (the baseline)
  int num_threads = 0;         // CPU compute threads; 0: OpenMP's default
  void* cuda_stream = nullptr; // CUDA: the compute stream (cudaStream_t)
};

struct TilingAllReduceReport {
  std::int64_t tile_rows = 0;
  std::int64_t num_tiles = 0;
  bool overlapped = false;
  std::string path;    // "cpu-threads", "cuda-cublaslt+nccl"
  std::string reason;  // why this tile size, in one sentence
};

// The general form: `produce(row_begin, row_end)` writes rows [row_begin, row_end) of this
// rank's partial `out` (e.g. attention of a query-row block followed by its output projection);
// each finished tile is summed over ranks in place while the next one is produced. out: [M, N]
// contiguous f32 / f16 / bf16 on comm.device(). On CPU communicators produce runs on the calling
// thread and the reductions on a second one. Every rank must use the same M and tile_rows.
TilingAllReduceReport tiled_all_reduce(Communicator& comm, const TensorView& out,
                                       const std::function<void(std::int64_t, std::int64_t)>& produce,
                                       const TilingAllReduceOptions& options = {});

// out = AllReduce(attn_out @ w_o). attn_out: [M, K] (this rank's K features), w_o: [K, N] (its
// rows of the projection), out: [M, N]; contiguous, one dtype (f32 / f16 / bf16), f32
// accumulation. CPU tensors: a blocked CPU GEMM per tile. CUDA tensors (NCCL builds):
// cuBLASLt per tile on options.cuda_stream, an event per tile, the tile's ncclAllReduce on a
// second stream.
TilingAllReduceReport matmul_all_reduce(Communicator& comm, const TensorView& attn_out,
                                        const TensorView& w_o, const TensorView& out,
                                        const TilingAllReduceOptions& options = {});

// ---- context parallelism: ring attention ---------------------------------------------------
// Global tokens [start, start + length).
struct TokenChunk {
  std::int64_t start = 0;
  std::int64_t length = 0;
};

// Which global tokens each rank holds, in its local order (a rank's chunks are concatenated).
struct SequenceShards {
  std::int64_t seqlen = 0;                       // global
  std::vector<std::vector<TokenChunk>> chunks;   // [rank] -> its chunks

  int world_size() const { return static_cast<int>(chunks.size()); }
  std::int64_t local_length(int rank) const;

  // One chunk per rank, of the given lengths, in rank order (uneven lengths and 0 allowed).
  static SequenceShards contiguous(const std::vector<std::int64_t>& lengths);
  // seqlen split as evenly as possible over `world` ranks.
  static SequenceShards contiguous(std::int64_t seqlen, int world);
  // Zigzag (DualChunkSwap): seqlen cut into 2 * world chunks as even as possible; rank r holds
  // chunks r and 2 * world - 1 - r, so every rank gets the same share of causal work.
  static SequenceShards zigzag(std::int64_t seqlen, int world);
};

// Copies rank `rank`'s tokens of a global [batch, seqlen, heads, head_dim] tensor into its local
// [batch, local_length, heads, head_dim] tensor (shard_tokens) or back (unshard_tokens). Same
// dtype and heads, any strides with head_dim contiguous, CPU tensors.
void shard_tokens(const SequenceShards& shards, int rank, const TensorView& global, const TensorView& local);
void unshard_tokens(const SequenceShards& shards, int rank, const TensorView& local, const TensorView& global);
// The same for lse tensors [batch, heads, seqlen] (f32).
void shard_lse(const SequenceShards& shards, int rank, const TensorView& global, const TensorView& local);
void unshard_lse(const SequenceShards& shards, int rank, const TensorView& local, const TensorView& global);

// Precision of the per-block results before ring attention merges them (always in f32).
//   f32:         16-bit q, k, v (and out, dout) are widened to f32 for the block calls, so no
//                partial is rounded to 16 bits: the error does not grow with the rank count.
//                The block calls run the f32 kernels (slower than the bf16 ones on CPUs with
//                bf16 units).
//   input_dtype: the block calls run in the input dtype (the fast kernels) and each block's
//                partial is rounded to it once before the f32 merge: up to about one more ulp.
enum class RingPartials { f32, input_dtype };

struct RingOptions {
  bool causal = false;  // bottom-right aligned over the global sequences, as AttentionOptions
  std::optional<float> softmax_scale;  // default 1/sqrt(head_dim)
  Backend backend = Backend::cpu;      // of the per-block forward / backward calls
  int num_threads = 0;                 // CPU threads of the per-block calls
  bool overlap = true;  // false: each K/V step's transfer, then its compute (the baseline)
  RingPartials partials = RingPartials::f32;
};

struct RingReport {
  int steps = 0;          // ring steps (the world size)
  int block_calls = 0;    // forward / backward calls made (causal skips blocks that see nothing)
  std::string kernel;     // the per-block kernel (the last call's KernelChoice)
};

// Ring attention: this rank's q (global tokens q_shards.chunks[rank]) against the keys of every
// rank, the K/V blocks travelling round the ring (double-buffered: the next block arrives while
// this one computes) and the per-block partials merged in f32 by merge_states.
//   q, out: [batch, local_q, num_heads, head_dim]; k, v: [batch, local_k, num_kv_heads, head_dim]
//   lse:    optional f32 [batch, num_heads, local_q], the global log-sum-exp (backward needs it)
// One dtype (f32 / f16 / bf16), CPU tensors on a CPU communicator. q_shards and kv_shards are
// the same on every rank; causal masks by global position (key j visible to query i when
// j <= i + kv_shards.seqlen - q_shards.seqlen). Throws on bad input before any communication.
RingReport ring_attention_forward(Communicator& comm, const SequenceShards& q_shards,
                                  const SequenceShards& kv_shards, const TensorView& q,
                                  const TensorView& k, const TensorView& v, const TensorView& out,
                                  const std::optional<TensorView>& lse, const RingOptions& options = {});

// Gradients of ring_attention_forward: dq like q; dk, dv like k (this rank's keys). K/V travel
// the ring again; each block's dK/dV accumulate in f32 as they travel and return to their owner
// after the last step. out and lse as written by ring_attention_forward.
RingReport ring_attention_backward(Communicator& comm, const SequenceShards& q_shards,
                                   const SequenceShards& kv_shards, const TensorView& dout,
                                   const TensorView& q, const TensorView& k, const TensorView& v,
                                   const TensorView& out, const TensorView& lse, const TensorView& dq,
                                   const TensorView& dk, const TensorView& dv,
                                   const RingOptions& options = {});

// ---- context parallelism: Ulysses all-to-all ---------------------------------------------------
// DeepSpeed-Ulysses: an all-to-all turns the sequence-sharded q, k, v (all heads, this rank's
// tokens) into head-sharded ones (num_heads / P heads, every token), one fastattn::forward /
// backward runs over the whole sequence for those heads, and a second all-to-all returns out (or
// dq, dk, dv) to the sequence shards. Needs num_heads and num_kv_heads divisible by the world
// size (so Ulysses is limited by the KV heads; ring attention is not). Tensors and options as
// ring_attention_forward / _backward (RingOptions::overlap and ::partials do not apply: there is
// one call per rank, in the input dtype, and nothing to merge).
RingReport ulysses_attention_forward(Communicator& comm, const SequenceShards& q_shards,
                                     const SequenceShards& kv_shards, const TensorView& q,
                                     const TensorView& k, const TensorView& v, const TensorView& out,
                                     const std::optional<TensorView>& lse, const RingOptions& options = {});
RingReport ulysses_attention_backward(Communicator& comm, const SequenceShards& q_shards,
                                      const SequenceShards& kv_shards, const TensorView& dout,
                                      const TensorView& q, const TensorView& k, const TensorView& v,
                                      const TensorView& out, const TensorView& lse, const TensorView& dq,
                                      const TensorView& dk, const TensorView& dv,
                                      const RingOptions& options = {});

}  // namespace fastattn::distributed
