"""`import fastattn` has no side effects (issue 14): it reads no FASTATTN_* environment variable
and makes no CUDA call, so a bad variable is an error of the first call (naming it), and a
process may import fastattn and then fork workers that use CUDA. The variables are read once per
process; fastattn.reload_environment() reads them again.

Each check runs in a fresh interpreter (subprocess), since this process has imported fastattn
and made calls already."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastattn


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=120)


def test_import_succeeds_with_a_bad_variable_and_the_first_call_names_it():
    r = run_python("""
        import numpy as np
        import fastattn
        print("imported", fastattn.__version__)
        q = np.ones((1, 8, 2, 16), dtype=np.float32)
        try:
            fastattn.attention(q, q, q, backend="cpu")
        except ValueError as e:
            print("raised:", e)
        else:
            print("no error")
    """, FASTATTN_CPU_ISA="bogus")
    assert r.returncode == 0, r.stderr
    assert "imported " + fastattn.__version__ in r.stdout
    assert ("raised: FASTATTN_CPU_ISA: expected one of none, avx2, avx512, avx512bf16, amx, got 'bogus'"
            in r.stdout), r.stdout


def test_variables_are_read_once_and_at_reload():
    r = run_python("""
        import os
        import numpy as np
        import fastattn
        q = np.ones((1, 8, 2, 16), dtype=np.float32)
        fastattn.attention(q, q, q, backend="cpu")          # takes the snapshot
        os.environ["FASTATTN_CPU_ISA"] = "bogus"
        fastattn.attention(q, q, q, backend="cpu")          # not seen
        print("kept the snapshot")
        fastattn.reload_environment()                       # does not check the value
        try:
            fastattn.attention(q, q, q, backend="cpu")
        except ValueError as e:
            print("raised:", e)
    """, FASTATTN_CPU_ISA="")
    assert r.returncode == 0, r.stderr
    assert "kept the snapshot" in r.stdout
    assert "raised: FASTATTN_CPU_ISA" in r.stdout, r.stdout


def test_version_needs_no_build_info():
    assert fastattn.__version__ == fastattn.build_info()["version"]


def _cuda_driver_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def _cuda_devices() -> list:
    # In a child, so that this process's CUDA state is not the question.
    r = run_python("import fastattn; print(len(fastattn.build_info()['cuda_devices']))")
    return int(r.stdout.strip() or 0) if r.returncode == 0 else 0


requires_gpu = pytest.mark.skipif(
    not fastattn.build_info()["cuda_compiled"] or not _cuda_driver_loads() or _cuda_devices() == 0,
    reason="needs a CUDA build of fastattn and a GPU")


# The driver API answers CUDA_ERROR_NOT_INITIALIZED (3) to anything but cuInit until someone in
# the process has initialised it; fastattn's runtime and ctypes load the same libcuda.so.1.
_DRIVER_STATE = """
    import ctypes
    def driver_initialised():
        cuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(0)
        rc = cuda.cuDeviceGetCount(ctypes.byref(count))
        assert rc in (0, 3), rc
        return rc == 0
"""


@requires_gpu
def test_import_does_not_initialise_cuda():
    r = run_python(_DRIVER_STATE + """
    import fastattn
    print("after import:", driver_initialised())
    fastattn.build_info()   # queries the devices: initialises (the check's control)
    print("after build_info:", driver_initialised())
    """)
    assert r.returncode == 0, r.stderr
    assert "after import: False" in r.stdout, r.stdout
    assert "after build_info: True" in r.stdout, r.stdout


@requires_gpu
def test_a_forked_child_of_an_importer_can_use_cuda():
    r = run_python("""
    import os
    import fastattn
    pid = os.fork()
    if pid == 0:
        os._exit(0 if fastattn.build_info()["cuda_devices"] else 1)
    _, status = os.waitpid(pid, 0)
    print("child saw a GPU:", os.waitstatus_to_exitcode(status) == 0)
    """)
    assert r.returncode == 0, r.stderr
    assert "child saw a GPU: True" in r.stdout, r.stdout
