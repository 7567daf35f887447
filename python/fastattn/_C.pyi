"""fastattn C++ bindings (nanobind). Use the functions of the fastattn package, not these.

Array arguments are any object nanobind's ndarray accepts without a copy: objects with
__dlpack__ (NumPy, PyTorch, CuPy, JAX), DLPack capsules, buffer-protocol objects. Shapes are
those of fastattn.attention (q [batch, seqlen_q, heads, head_dim], ...).
"""

import enum
from typing import Any, Dict, List, Optional, Tuple

Array = Any  # a DLPack-capable array or a DLPack capsule

class UnsupportedError(ValueError):
    """The call is well formed but this build of fastattn has no kernel for it (for example a
    CUDA tensor in a build without CUDA). A subclass of ValueError."""


class Backend(enum.Enum):
    automatic = 0

    cpu = 1

    reference = 2

    cuda = 3

class MaskAlignment(enum.Enum):
    bottom_right = 0

    top_left = 1

class CallOptions:
    """
    Scalar options of a call (internal); read-only, so the Python layer can reuse them.
    """

    def __init__(self, causal: bool, window_left: int, window_right: int,
                 softmax_scale: Optional[float], softcap: float, max_seqlen_q: int,
                 max_seqlen_k: int, alignment: MaskAlignment, backend: Backend,
                 num_threads: int, deterministic: bool, cuda_stream: int,
                 u16_is_bf16: bool) -> None: ...

    @property
    def causal(self) -> bool: ...

    @property
    def window_left(self) -> int: ...

    @property
    def window_right(self) -> int: ...

    @property
    def softmax_scale(self) -> Optional[float]: ...

    @property
    def softcap(self) -> float: ...

    @property
    def max_seqlen_q(self) -> int: ...

    @property
    def max_seqlen_k(self) -> int: ...

    @property
    def alignment(self) -> MaskAlignment: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def num_threads(self) -> int: ...

    @property
    def deterministic(self) -> bool: ...

    @property
    def cuda_stream(self) -> int: ...

    @property
    def u16_is_bf16(self) -> bool: ...

class KernelChoice:
    """What the dispatcher chose for a call: backend, kernel, tiles, threads."""

    @property
    def backend(self) -> str:
        """'cpu', 'reference' or 'cuda'."""

    @property
    def kernel(self) -> str:
        """Kernel name, e.g. 'cpu.forward.avx2.f32.d64'."""

    @property
    def isa(self) -> str:
        """Instruction set, e.g. 'avx2', 'scalar', 'sm80'."""

    @property
    def block_q(self) -> int:
        """Query rows per tile."""

    @property
    def block_k(self) -> int:
        """Key rows per tile."""

    @property
    def num_threads(self) -> int:
        """CPU threads or CUDA blocks per SM."""

    @property
    def workspace_bytes(self) -> int:
        """Scratch memory the call uses."""

    @property
    def device_memory_bytes(self) -> int:
        """CUDA: device memory the call needs (its tensors + workspace_bytes); 0 on the CPU."""

    @property
    def reason(self) -> str:
        """Why this kernel, in one sentence."""

    def describe(self) -> str:
        """One line for logs."""

    def __repr__(self) -> str: ...

def forward(q: Array, k: Array, v: Array, out: Array, lse: Optional[Array],
            cu_seqlens_q: Optional[Array], cu_seqlens_k: Optional[Array], options: CallOptions,
            plan_only: bool) -> KernelChoice:
    """
    fastattn::forward (or plan_forward with plan_only) on arrays, without copies.
    """

def run_forward(q: Array, k: Array, v: Array, out: Array, lse: Optional[Array],
                cu_seqlens_q: Optional[Array], cu_seqlens_k: Optional[Array],
                options: CallOptions) -> None:
    """
    fastattn::forward on arrays, returning None (no KernelChoice object).
    """

def backward(dout: Array, q: Array, k: Array, v: Array, out: Array, lse: Array, dq: Array,
             dk: Array, dv: Array, cu_seqlens_q: Optional[Array], cu_seqlens_k: Optional[Array],
             options: CallOptions, plan_only: bool) -> KernelChoice:
    """
    fastattn::backward (or plan_backward with plan_only) on arrays, without copies.
    """

def time_forward(q: Array, k: Array, v: Array, out: Array, lse: Optional[Array],
                 cu_seqlens_q: Optional[Array], cu_seqlens_k: Optional[Array],
                 options: CallOptions, iterations: int) -> float:
    """
    Seconds per fastattn::forward call, timed inside C++ (no Python in the loop).
    """

__version__: str

def build_info() -> Dict[str, Any]:
    """Build and machine facts of the C++ library."""

def reload_environment() -> None:
    """fastattn::reload_environment: re-read the FASTATTN_* environment variables (read once per process)."""

def set_device_memory_limit(bytes: Optional[int]) -> None:
    """fastattn::set_device_memory_limit: bytes (0: no limit), None: FASTATTN_DEVICE_MEMORY_LIMIT."""

def device_memory_limit() -> Tuple[int, str]:
    """(bytes, source) of the process-wide limit in force; bytes 0: none."""

def parse_memory_size(text: str, name: str) -> int:
    """'16G', '32GiB', '1.5GB', '17179869184' -> bytes (ValueError naming `name` otherwise)."""

def merge_states(out_a: Array, lse_a: Array, out_b: Array, lse_b: Array, out: Array,
                 lse: Optional[Array], backend: Backend, num_threads: int, cuda_stream: int,
                 u16_is_bf16: bool, plan_only: bool) -> KernelChoice:
    """
    fastattn::merge_states (or plan_merge_states with plan_only) on arrays, without copies.
    """

def attention_with_kv_cache(q: Array, k_cache: Array, v_cache: Array, cache_seqlens: Array,
                            block_table: Optional[Array], k_new: Optional[Array],
                            v_new: Optional[Array], out: Array, lse: Optional[Array],
                            options: CallOptions) -> KernelChoice:
    """
    fastattn::attention_with_kv_cache on arrays, without copies.
    """

class KVCachePlan:
    """
    fastattn::KVCachePlan: planned once for a call's shape, run many times (internal; use fastattn.KVCachePlan).
    """

    def __init__(self, q: Array, k_cache: Array, v_cache: Array, cache_seqlens: Array,
                 block_table: Optional[Array], k_new: Optional[Array], v_new: Optional[Array],
                 with_lse: bool, max_cache_len: int, options: CallOptions) -> None:
        """Plans for the shapes, dtype and device of these arrays (their values are not read)."""

    def run(self, q: Array, k_cache: Array, v_cache: Array, cache_seqlens: Array,
            block_table: Optional[Array], k_new: Optional[Array], v_new: Optional[Array],
            out: Array, lse: Optional[Array], cuda_stream: int, u16_is_bf16: bool) -> None:
        """KVCachePlan::run on arrays (no value checks, no allocation, no synchronisation); its KernelChoice is choice."""

    @property
    def choice(self) -> KernelChoice:
        """The KernelChoice run() launches, and why."""

    @property
    def shape(self) -> Dict[str, Any]:
        """The KVCacheShape the plan serves, as a dict."""

class CooperativeKVCache:
    """
    fastattn::CooperativeKVCache: pages in device memory up to a budget, the rest in pinned host memory (internal; use fastattn.CooperativeKVCache).
    """

    def __init__(self, dtype: str, num_kv_heads: int, head_dim: int, page_size: int, max_sequences: int,
                 device_budget_bytes: int, staging_pages: int, host_pages: int, device: int) -> None:
        """device -1: the CPU emulation; i >= 0: CUDA device i."""

    def append(self, seq: int, k: Array, v: Array, u16_is_bf16: bool) -> None: ...
    def set_pages(self, seq: int, pages: List[int], length: int) -> None: ...
    def release(self, seq: int) -> None: ...
    def length(self, seq: int) -> int: ...
    def pages(self, seq: int) -> List[int]: ...
    def tier(self, page: int) -> str: ...
    def free_pages(self, tier: str) -> int: ...
    def check_room(self, seq: int, tokens: int, name: str) -> None: ...
    @property
    def device_pages(self) -> int: ...
    @property
    def host_pages(self) -> int: ...
    @property
    def page_bytes(self) -> int: ...
    @property
    def staging_bytes(self) -> int: ...
    @property
    def device_bytes(self) -> int: ...

class CooperativeStep:
    """
    fastattn::CooperativeStep: planned once for q's shape and a cache, run many times (internal; use fastattn.CooperativeStep).
    """

    def __init__(self, q: Array, cache: CooperativeKVCache, options: CallOptions, policy: str,
                 stream_fraction: float, parts: int, rates: str) -> None:
        """Plans for q's shape and the cache (which the step keeps alive)."""

    def run(self, q: Array, seq: int, out: Array, lse: Optional[Array], k_new: Optional[Array],
            v_new: Optional[Array], u16_is_bf16: bool) -> KernelChoice: ...

    def plan(self, seq: int) -> Dict[str, Any]:
        """The split run() would use for seq now, as a dict."""

def cooperative_attention(q: Array, cache: CooperativeKVCache, seq: int, out: Array, lse: Optional[Array],
                          k_new: Optional[Array], v_new: Optional[Array], options: CallOptions, policy: str,
                          stream_fraction: float, parts: int, rates: str) -> KernelChoice:
    """
    fastattn::cooperative_attention on arrays.
    """
