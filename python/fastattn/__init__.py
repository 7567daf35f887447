"""fastattn: exact memory-efficient attention (FlashAttention-2) for any DLPack array.

    import fastattn
    out = fastattn.attention(q, k, v, causal=True)          # q: [batch, seqlen, heads, head_dim]
    out, lse = fastattn.attention(q, k, v, return_lse=True)
    dq, dk, dv = fastattn.attention_backward(dout, q, k, v, out, lse)
    out = fastattn.attention_with_kv_cache(q, k_cache, v_cache, cache_seqlens, block_table,
                                           k_new, v_new, causal=True)   # decode over a (paged) cache

Works on NumPy (bfloat16 via ml_dtypes), PyTorch, CuPy and JAX arrays without copies; outputs
are allocated in the framework of q. For PyTorch autograd and torch.compile use
``fastattn.torch.attention``. See docs/python.md.
"""

from ._C import KernelChoice, UnsupportedError
from ._C import __version__ as _version
from ._api import (attention, attention_backward, build_info, device_memory_limit, plan,
                   reload_environment, set_device_memory_limit)
from ._cooperative import CooperativeKVCache, CooperativeStep, cooperative_attention
from ._kv_cache import KVCachePlan, attention_with_kv_cache
from ._merge import merge_states

# Importing makes no CUDA call and reads no environment variable (docs/python.md): the version is
# the extension's constant, not build_info()'s, which queries the devices.
__version__: str = _version

__all__ = [
    "CooperativeKVCache",
    "CooperativeStep",
    "KVCachePlan",
    "KernelChoice",
    "UnsupportedError",
    "attention",
    "attention_backward",
    "attention_with_kv_cache",
    "build_info",
    "cooperative_attention",
    "device_memory_limit",
    "merge_states",
    "plan",
    "reload_environment",
    "set_device_memory_limit",
]


def __getattr__(name: str):
    # `fastattn.torch` without an explicit import; torch itself stays optional.
    if name == "torch":
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'fastattn' has no attribute {name!r}")
