// tiling_all_reduce.cpp — out = AllReduce(partial out), produced and reduced in row tiles
// (fastattn/distributed.hpp). CPU communicators here: the calling thread produces tiles, a
// WorkerThread reduces each one as soon as its ready count says it is done. CUDA tensors go to
// tiling_all_reduce_cuda.cpp (NCCL builds).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "api/view_checks.hpp"
#include "common/dtype.hpp"
#include "distributed/comm_common.hpp"
#include "common/worker_thread.hpp"
#include "distributed/tiling_all_reduce_cuda.hpp"

namespace fastattn::distributed {
namespace {

void check_matrix(const TensorView& t, const std::string& arg) {
  if (t.rank != 2) fail_argument(arg, "a 2-D tensor", std::to_string(t.rank) + "-D " + t.shape_string());
}

TensorView tile_rows_view(TensorView t, std::int64_t begin, std::int64_t end) {
  t.data = static_cast<std::uint8_t*>(t.data) + begin * t.stride[0] * static_cast<std::int64_t>(dtype_size(t.dtype));
  t.shape[0] = end - begin;
  return t;
}

// Tile size on the CPU: about 8 tiles (the first reduction waits for one tile of compute, the
// last tile's reduction is not overlapped: 1/8 of each is exposed), at least 8 rows so a tile's
// all-reduce is not all synchronisation.
std::int64_t cpu_tile_rows(std::int64_t rows, std::string& reason) {
  const std::int64_t t = std::max<std::int64_t>(8, (rows + 7) / 8);
  reason = "CPU ranks: about 8 tiles of >= 8 rows, so 1/8 of the compute and of the reduction stay exposed";
  return std::min<std::int64_t>(t, std::max<std::int64_t>(rows, 1));
}

// Tiles handed from the producer to the reducer: `ready` tiles are done; `cancelled` when either
// side failed.
struct TileHandoff {
  std::mutex mu;
  std::condition_variable cv;
  std::int64_t ready = 0;
  bool cancelled = false;

  void publish(std::int64_t count) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ready = count;
    }
    cv.notify_all();
  }
  void cancel() {
    {
      std::lock_guard<std::mutex> lock(mu);
      cancelled = true;
    }
    cv.notify_all();
  }
  bool wait_for(std::int64_t tile) {  // false: cancelled
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return ready > tile || cancelled; });
    return ready > tile;
  }
  bool is_cancelled() {
    std::lock_guard<std::mutex> lock(mu);
    return cancelled;
  }
};

}  // namespace

TilingAllReduceReport tiled_all_reduce(Communicator& comm, const TensorView& out,
                                       const std::function<void(std::int64_t, std::int64_t)>& produce,
                                       const TilingAllReduceOptions& options) {
  check_matrix(out, "tiled_all_reduce: out");
  check_reduce_buffer(out, comm.device(), "tiled_all_reduce: out");
  if (options.tile_rows < 0) fail_argument("options.tile_rows", ">= 0 (0: chosen)", std::to_string(options.tile_rows));
  if (!produce) fail_argument("tiled_all_reduce: produce", "a callable", "an empty std::function");
  if (out.device.type == DeviceType::cuda) return tiled_all_reduce_cuda(comm, out, produce, options);

  TilingAllReduceReport report;
  report.path = "cpu-threads";
  const std::int64_t rows = out.shape[0];
  report.tile_rows = options.tile_rows > 0 ? options.tile_rows : cpu_tile_rows(rows, report.reason);
  if (options.tile_rows > 0) report.reason = "tile_rows given by the caller";
  report.num_tiles = rows == 0 ? 0 : (rows + report.tile_rows - 1) / report.tile_rows;
  report.overlapped = options.overlap && report.num_tiles > 1;
  const std::int64_t tile = report.tile_rows, tiles = report.num_tiles;
  auto tile_end = [&](std::int64_t t) { return std::min(rows, (t + 1) * tile); };

  if (!report.overlapped) {
    // The baseline: every tile, then one all-reduce of the whole output.
    try {
      for (std::int64_t t = 0; t < tiles; ++t) produce(t * tile, tile_end(t));
    } catch (const std::exception& e) {
      comm.abort(std::string("tiled_all_reduce: produce threw: ") + e.what());
      throw;
    }
    comm.all_reduce_sum(out);
    return report;
  }

  TileHandoff handoff;
  WorkerThread reducer;
  reducer.submit([&] {
    try {
      for (std::int64_t t = 0; t < tiles; ++t) {
        if (!handoff.wait_for(t)) return;
        comm.all_reduce_sum(tile_rows_view(out, t * tile, tile_end(t)));
      }
    } catch (...) {
      handoff.cancel();  // the producer stops at its next tile
      throw;
    }
  });
  try {
    for (std::int64_t t = 0; t < tiles && !handoff.is_cancelled(); ++t) {
      produce(t * tile, tile_end(t));
      handoff.publish(t + 1);
    }
  } catch (const std::exception& e) {
    // The peers are inside (or will enter) this tile's all-reduce: fail them now rather than
    // at their timeout.
    comm.abort(std::string("tiled_all_reduce: produce threw: ") + e.what());
    handoff.cancel();
    try {
      reducer.wait();
    } catch (...) {
    }
    throw;
  }
  reducer.wait();  // rethrows a communication failure
  return report;
}

namespace {

// The f32 copy of a contiguous [rows, cols] matrix.
std::vector<float> to_f32(const TensorView& t) {
  const std::int64_t n = t.numel();
  std::vector<float> f(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) f[static_cast<std::size_t>(i)] = static_cast<float>(load_element(t.data, t.dtype, i));
  return f;
}

void check_same(const TensorView& t, const TensorView& like, const std::string& arg) {
  if (t.dtype != like.dtype) fail_argument(arg, "dtype " + std::string(to_string(like.dtype)) + " (that of attn_out)", to_string(t.dtype));
}

}  // namespace

TilingAllReduceReport matmul_all_reduce(Communicator& comm, const TensorView& attn_out, const TensorView& w_o,
                                        const TensorView& out, const TilingAllReduceOptions& options) {
  check_matrix(attn_out, "matmul_all_reduce: attn_out");
  check_matrix(w_o, "matmul_all_reduce: w_o");
  check_matrix(out, "matmul_all_reduce: out");
  check_reduce_buffer(attn_out, comm.device(), "matmul_all_reduce: attn_out");
  check_reduce_buffer(w_o, comm.device(), "matmul_all_reduce: w_o");
  check_reduce_buffer(out, comm.device(), "matmul_all_reduce: out");
  check_same(w_o, attn_out, "matmul_all_reduce: w_o");
  check_same(out, attn_out, "matmul_all_reduce: out");
  const std::int64_t m = attn_out.shape[0], k = attn_out.shape[1], n = w_o.shape[1];
  if (w_o.shape[0] != k)
    fail_argument("matmul_all_reduce: w_o", "shape[0] = attn_out.shape[1] = " + std::to_string(k), std::to_string(w_o.shape[0]));
  if (out.shape[0] != m || out.shape[1] != n)
    fail_argument("matmul_all_reduce: out", "shape [" + std::to_string(m) + ", " + std::to_string(n) + "]", out.shape_string());
  if (out.device.type == DeviceType::cuda) return matmul_all_reduce_cuda(comm, attn_out, w_o, out, options);

  // w: [K, N] f32, converted once; a: the rows of attn_out as f32, per tile.
  const std::vector<float> w = to_f32(w_o);
  const int threads = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
  auto produce = [&](std::int64_t row_begin, std::int64_t row_end) {
#pragma omp parallel num_threads(threads)
    {
      std::vector<float> a(static_cast<std::size_t>(k)), acc(static_cast<std::size_t>(n));
#pragma omp for schedule(static)
      for (std::int64_t i = row_begin; i < row_end; ++i) {
        for (std::int64_t j = 0; j < k; ++j) a[static_cast<std::size_t>(j)] = static_cast<float>(load_element(attn_out.data, attn_out.dtype, i * k + j));
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (std::int64_t j = 0; j < k; ++j) {
          const float aj = a[static_cast<std::size_t>(j)];
          const float* wj = w.data() + j * n;
          for (std::int64_t c = 0; c < n; ++c) acc[static_cast<std::size_t>(c)] += aj * wj[c];
        }
        for (std::int64_t c = 0; c < n; ++c) store_element(out.data, out.dtype, i * n + c, acc[static_cast<std::size_t>(c)]);
      }
    }
  };
  return tiled_all_reduce(comm, out, produce, options);
}

}  // namespace fastattn::distributed
