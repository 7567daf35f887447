# distributed.cmake — fastattn::distributed (include/fastattn/distributed.hpp, src/distributed/):
# communicators, tiling-AllReduce, ring attention. Included by the top-level CMakeLists.txt after
# the fastattn target exists.
#
#   FASTATTN_DISTRIBUTED  ON (default): build it when threads are available; OFF: leave it out.
#   FASTATTN_NCCL         AUTO (default): the NCCL communicator and the CUDA tiling-AllReduce when
#                         CUDA is on and nccl.h + libnccl are found; ON: require them; OFF: never.
#   FASTATTN_NCCL_ROOT    where NCCL is (a directory with include/nccl.h and lib/libnccl.so*):
#                         the CUDA toolkit, a system NCCL, or the PyPI wheel nvidia-nccl-cu13
#                         (<site-packages>/nvidia/nccl). Also searched: $NCCL_ROOT, $NCCL_HOME, the
#                         CUDA toolkit's directories, and the wheel in the Python found on PATH.
option(FASTATTN_DISTRIBUTED "Build fastattn::distributed (communicators, tiling-AllReduce, ring attention)" ON)
set(FASTATTN_NCCL "AUTO" CACHE STRING "NCCL communicator: AUTO (when CUDA is on and NCCL is found), ON or OFF")
set_property(CACHE FASTATTN_NCCL PROPERTY STRINGS AUTO ON OFF)
set(FASTATTN_NCCL_ROOT "" CACHE PATH "NCCL location: a directory with include/nccl.h and lib/libnccl.so[.2] (e.g. <site-packages>/nvidia/nccl)")
option(FASTATTN_TSAN_DISTRIBUTED "Add fastattn_distributed_tsan: the CPU-rank tests under ThreadSanitizer (a separate small target)" OFF)

set(FASTATTN_WITH_DISTRIBUTED OFF)
set(FASTATTN_WITH_NCCL OFF)
if(FASTATTN_DISTRIBUTED)
  set(THREADS_PREFER_PTHREAD_FLAG ON)
  find_package(Threads)
  if(Threads_FOUND)
    set(FASTATTN_WITH_DISTRIBUTED ON)
  else()
    message(STATUS "fastattn: no thread library found, building without fastattn::distributed")
  endif()
else()
  message(STATUS "fastattn: FASTATTN_DISTRIBUTED=OFF, building without fastattn::distributed")
endif()

if(FASTATTN_WITH_DISTRIBUTED AND NOT FASTATTN_NCCL STREQUAL "OFF")
  set(nccl_missing "")
  if(NOT FASTATTN_WITH_CUDA)
    set(nccl_missing "CUDA is off")
  elseif(FASTATTN_BUILD_PYTHON AND FASTATTN_NCCL STREQUAL "AUTO")
    # The extension would need libnccl.so.2 and libcublasLt at import time on every machine, and
    # no Python binding uses the NCCL communicator yet.
    set(nccl_missing "the Python extension does not link NCCL unless FASTATTN_NCCL=ON")
  else()
    # The PyPI wheel: nvidia/nccl inside the site-packages of the Python on PATH, if any.
    set(nccl_wheel_dir "")
    find_program(FASTATTN_PYTHON_FOR_NCCL NAMES python3 python)
    mark_as_advanced(FASTATTN_PYTHON_FOR_NCCL)
    if(FASTATTN_PYTHON_FOR_NCCL)
      execute_process(
        COMMAND ${FASTATTN_PYTHON_FOR_NCCL} -c
          "import importlib.util as u; s = u.find_spec('nvidia.nccl'); print(list(s.submodule_search_locations)[0] if s else '')"
        OUTPUT_VARIABLE nccl_wheel_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    endif()
    set(nccl_hints ${FASTATTN_NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${nccl_wheel_dir}
                   ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
    find_path(FASTATTN_NCCL_INCLUDE_DIR nccl.h HINTS ${nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
    # The wheel ships only libnccl.so.2 (no unversioned name).
    find_library(FASTATTN_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
                 PATH_SUFFIXES lib lib64)
    mark_as_advanced(FASTATTN_NCCL_INCLUDE_DIR FASTATTN_NCCL_LIBRARY)
    if(NOT FASTATTN_NCCL_INCLUDE_DIR)
      set(nccl_missing "nccl.h not found")
    elseif(NOT FASTATTN_NCCL_LIBRARY)
      set(nccl_missing "libnccl not found")
    elseif(NOT TARGET CUDA::cublasLt)
      set(nccl_missing "cuBLASLt (the per-tile GEMM) not found")
    else()
      file(STRINGS ${FASTATTN_NCCL_INCLUDE_DIR}/nccl.h nccl_version_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
      set(FASTATTN_NCCL_VERSION "")
      foreach(part IN ITEMS MAJOR MINOR PATCH)
        foreach(line IN LISTS nccl_version_lines)
          if(line MATCHES "NCCL_${part} +([0-9]+)")
            list(APPEND FASTATTN_NCCL_VERSION ${CMAKE_MATCH_1})
          endif()
        endforeach()
      endforeach()
      string(REPLACE ";" "." FASTATTN_NCCL_VERSION "${FASTATTN_NCCL_VERSION}")
      # ncclCommInitRankConfig (non-blocking init) and ncclCommGetAsyncError polling: >= 2.14.
      if(FASTATTN_NCCL_VERSION VERSION_LESS 2.14)
        set(nccl_missing "NCCL ${FASTATTN_NCCL_VERSION} at ${FASTATTN_NCCL_INCLUDE_DIR} is older than 2.14")
      endif()
    endif()
  endif()
  if(nccl_missing STREQUAL "")
    set(FASTATTN_WITH_NCCL ON)
    message(STATUS "fastattn: NCCL ${FASTATTN_NCCL_VERSION} (${FASTATTN_NCCL_INCLUDE_DIR}, ${FASTATTN_NCCL_LIBRARY}): "
                   "building the NCCL communicator and the CUDA tiling-AllReduce")
  elseif(FASTATTN_NCCL STREQUAL "ON")
    set(nccl_hint "")
    if(nccl_missing MATCHES "not found")
      set(nccl_hint "; set FASTATTN_NCCL_ROOT to a directory with include/nccl.h and lib/libnccl.so "
                    "(e.g. <site-packages>/nvidia/nccl of pip install nvidia-nccl-cu13)")
    endif()
    message(FATAL_ERROR "FASTATTN_NCCL=ON but ${nccl_missing}${nccl_hint}")
  else()
    message(STATUS "fastattn: building fastattn::distributed without NCCL (${nccl_missing}; set FASTATTN_NCCL_ROOT to use one)")
  endif()
endif()

if(FASTATTN_WITH_DISTRIBUTED)
  set(FASTATTN_DISTRIBUTED_SOURCES
    ${CMAKE_CURRENT_SOURCE_DIR}/src/distributed/comm_common.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/src/distributed/cpu_world.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/src/distributed/ring_attention.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/src/distributed/ring_shards.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/src/distributed/sharded_checks.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/src/distributed/ulysses.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/src/distributed/tiling_all_reduce.cpp)
  if(FASTATTN_WITH_NCCL)
    list(APPEND FASTATTN_DISTRIBUTED_SOURCES
      ${CMAKE_CURRENT_SOURCE_DIR}/src/distributed/nccl_communicator.cpp
      ${CMAKE_CURRENT_SOURCE_DIR}/src/distributed/tiling_all_reduce_cuda.cpp)
  endif()
  target_sources(fastattn PRIVATE ${FASTATTN_DISTRIBUTED_SOURCES})
  target_link_libraries(fastattn PRIVATE Threads::Threads)
  target_compile_definitions(fastattn PRIVATE FASTATTN_HAVE_NCCL=$<BOOL:${FASTATTN_WITH_NCCL}>)
  if(FASTATTN_WITH_NCCL)
    target_include_directories(fastattn PRIVATE ${FASTATTN_NCCL_INCLUDE_DIR})
    target_link_libraries(fastattn PRIVATE ${FASTATTN_NCCL_LIBRARY} CUDA::cublasLt)
  endif()
endif()
