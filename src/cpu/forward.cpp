// forward.cpp — cpu::forward: runs the instantiation of the forward kernel that the
// dispatcher chose (KernelChoice::isa), never another.
#include <string>

#include "cpu/cpu_backend.hpp"
#include "cpu/forward_isa.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cpu {

void forward(const AttentionProblem& p, const KernelChoice& choice) {
  const Isa isa = isa_from_string(choice.isa);
  if (isa == Isa::none || static_cast<int>(isa) > static_cast<int>(detect_isa())) {
    throw Error(ErrorCode::unsupported,
                "cpu forward: expected an ISA this CPU and build run (at most " +
                    std::string(to_string(detect_isa())) + "), got " + choice.isa);
  }
  ForwardTiles tiles;
  tiles.block_q = choice.block_q;
  tiles.block_k = choice.block_k;
  tiles.num_threads = p.num_threads > 0 ? p.num_threads : choice.num_threads;
  switch (isa) {
    case Isa::avx2:
      forward_avx2(p, tiles);
      return;
    case Isa::avx512:
    case Isa::avx512bf16:
#if FASTATTN_HAVE_AVX512
      forward_avx512(p, tiles);
      return;
#else
      break;
#endif
    case Isa::none:
      break;
  }
  throw Error(ErrorCode::unsupported,
              std::string("cpu forward: no kernel for ISA ") + to_string(isa) + " in this build");
}

}  // namespace fastattn::cpu
