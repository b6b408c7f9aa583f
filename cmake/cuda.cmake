# CUDA's runtime and NCCL for the NCCL backend, found as third_party/cuda_configure.bzl finds them for
# Bazel, plus the layout of pip's nvidia-* wheels. Where to look, first match wins:
#   - $CUDA_HOME (or -DCUDA_HOME): include/cuda_runtime.h and lib64/libcudart.so;
#   - Debian's nvidia-cuda-toolkit: /usr/include/cuda_runtime.h, libcudart.so in the system folders;
#   - /usr/local/cuda.
# NCCL from $NCCL_HOME, the CUDA folder, /usr, then the nvidia/nccl folder of the Python environment
# LibTorch came from (a pip torch). When something is missing the backend still builds and reports
# the reason at run time, as with Bazel. When LibTorch itself has CUDA, the CUDA runtime found must
# have the major version LibTorch was built with: one process loads one libcudart.
include_guard(GLOBAL)

set(DTRAIN_NCCL_MISSING_REASON "")
set(_missing)
if(NOT DEFINED CUDA_HOME AND DEFINED ENV{CUDA_HOME})
  set(CUDA_HOME "$ENV{CUDA_HOME}")
endif()
if(NOT DEFINED NCCL_HOME AND DEFINED ENV{NCCL_HOME})
  set(NCCL_HOME "$ENV{NCCL_HOME}")
endif()

if(NOT CUDA_HOME AND EXISTS /usr/include/cuda_runtime.h)
  set(DTRAIN_CUDA_HOME /usr)
  set(_cuda_inc /usr/include)
  find_library(DTRAIN_CUDART_LIBRARY NAMES cudart)
else()
  if(CUDA_HOME)
    set(DTRAIN_CUDA_HOME "${CUDA_HOME}")
  else()
    set(DTRAIN_CUDA_HOME /usr/local/cuda)
  endif()
  set(_cuda_inc "${DTRAIN_CUDA_HOME}/include")
  find_library(DTRAIN_CUDART_LIBRARY NAMES cudart libcudart.so.13 libcudart.so.12
               PATHS "${DTRAIN_CUDA_HOME}/lib64" "${DTRAIN_CUDA_HOME}/lib" NO_DEFAULT_PATH)
endif()
if(NOT EXISTS "${_cuda_inc}/cuda_runtime.h")
  list(APPEND _missing "cuda_runtime.h not in ${_cuda_inc}")
endif()
if(NOT DTRAIN_CUDART_LIBRARY)
  list(APPEND _missing "libcudart.so not in ${DTRAIN_CUDA_HOME}/lib64")
endif()

# A pip torch's NCCL: site-packages/nvidia/nccl, beside site-packages/torch.
set(_nccl_roots ${NCCL_HOME} ${DTRAIN_CUDA_HOME} /usr)
get_filename_component(_site "${DTRAIN_TORCH_LIB_DIR}/../.." ABSOLUTE)
if(EXISTS "${_site}/nvidia/nccl/include/nccl.h")
  list(APPEND _nccl_roots "${_site}/nvidia/nccl")
endif()
find_path(DTRAIN_NCCL_INCLUDE_DIR nccl.h PATHS ${_nccl_roots} PATH_SUFFIXES include
          NO_DEFAULT_PATH)
find_library(DTRAIN_NCCL_LIBRARY NAMES nccl libnccl.so.2 PATHS ${_nccl_roots}
             PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu lib/aarch64-linux-gnu NO_DEFAULT_PATH)
if(NOT DTRAIN_NCCL_INCLUDE_DIR)
  list(APPEND _missing "nccl.h not in ${_nccl_roots}")
endif()
if(NOT DTRAIN_NCCL_LIBRARY)
  list(APPEND _missing "libnccl.so not in ${_nccl_roots}")
endif()

dtrain_system_target(dtrain_tp_cudart)
dtrain_system_target(dtrain_tp_nccl)
if(_missing)
  set(DTRAIN_HAVE_NCCL 0)
  list(JOIN _missing "; " DTRAIN_NCCL_MISSING_REASON)
  message(STATUS "dtrain: the NCCL backend is built without NCCL (${DTRAIN_NCCL_MISSING_REASON})")
else()
  set(DTRAIN_HAVE_NCCL 1)
  # The runtime's major version, from the header this build compiles against.
  file(STRINGS "${_cuda_inc}/cuda_runtime_api.h" _cudart_line REGEX "#define CUDART_VERSION ")
  string(REGEX MATCH "[0-9]+" _cudart_version "${_cudart_line}")
  math(EXPR DTRAIN_CUDART_MAJOR "${_cudart_version} / 1000")
  if(DTRAIN_TORCH_HAS_CUDA)
    # LibTorch's CMake files found the CUDA it was built with (CUDAToolkit or the older FindCUDA).
    set(_torch_cuda_version "${CUDAToolkit_VERSION}")
    if(NOT _torch_cuda_version)
      set(_torch_cuda_version "${CUDA_VERSION}")
    endif()
    string(REGEX MATCH "^[0-9]+" _torch_cuda_major "${_torch_cuda_version}")
    if(_torch_cuda_major AND NOT _torch_cuda_major EQUAL DTRAIN_CUDART_MAJOR)
      message(FATAL_ERROR
        "CUDA ${_cudart_version} in ${_cuda_inc} is not the CUDA ${_torch_cuda_version} LibTorch uses: "
        "one process cannot load both runtimes. Set CUDA_HOME to the CUDA LibTorch was built with.")
    endif()
  endif()
  # Absolute paths, also in the installed package (as LibTorch's own CMake files have them).
  target_include_directories(dtrain_tp_cudart INTERFACE ${_cuda_inc})
  target_link_libraries(dtrain_tp_cudart INTERFACE ${DTRAIN_CUDART_LIBRARY})
  target_include_directories(dtrain_tp_nccl INTERFACE ${DTRAIN_NCCL_INCLUDE_DIR})
  target_link_libraries(dtrain_tp_nccl INTERFACE ${DTRAIN_NCCL_LIBRARY} dtrain_tp_cudart)
  message(STATUS "dtrain: CUDA runtime ${_cudart_version} (${DTRAIN_CUDART_LIBRARY}), "
                 "NCCL ${DTRAIN_NCCL_LIBRARY}")
endif()

configure_file("${PROJECT_SOURCE_DIR}/cmake/cuda_config.h.in"
               "${DTRAIN_GENERATED_INCLUDE}/third_party/cuda_config.h" @ONLY)
dtrain_system_target(dtrain_tp_cuda_config)
target_include_directories(dtrain_tp_cuda_config INTERFACE
  $<BUILD_INTERFACE:${DTRAIN_GENERATED_INCLUDE}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/dtrain>)
