# The system libraries, found with find_package, as the targets the generated cmake/targets.cmake
# links (dtrain_tp_<name>, one per //third_party label). LibTorch and Abseil are required; for any
# other library that is missing, its target is not defined and the rules in dtrain_rules.cmake leave
# out exactly the targets that need it, saying which.
include_guard(GLOBAL)

set(DTRAIN_GENERATED_INCLUDE "${PROJECT_BINARY_DIR}/generated")

# Records why a system library is missing, for the summary at the end of the configure step.
function(dtrain_system_missing target what consequence)
  set_property(GLOBAL PROPERTY DTRAIN_MISSING_${target} "${what}")
  set_property(GLOBAL APPEND PROPERTY DTRAIN_MISSING_LIBRARIES "${what}")
  set_property(GLOBAL PROPERTY DTRAIN_CONSEQUENCE_${what} "${consequence}")
endfunction()

function(dtrain_system_target target)
  add_library(${target} INTERFACE)
  string(REPLACE "dtrain_tp_" "tp_" export_name "${target}")
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  target_link_libraries(${target} INTERFACE ${ARGN})
  set_property(GLOBAL APPEND PROPERTY DTRAIN_SYSTEM_TARGETS ${target})
endfunction()

# --- LibTorch ---------------------------------------------------------------------------------------
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  message(FATAL_ERROR
    "LibTorch not found. Point CMAKE_PREFIX_PATH at it: Debian's libtorch-dev needs nothing; a pip "
    "torch: -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)'); "
    "a LibTorch zip: -DCMAKE_PREFIX_PATH=/path/to/libtorch")
endif()
get_filename_component(DTRAIN_TORCH_LIB_DIR "${TORCH_LIBRARY}" DIRECTORY)
if(EXISTS "${DTRAIN_TORCH_LIB_DIR}/libtorch_cuda.so")
  set(DTRAIN_TORCH_HAS_CUDA 1)
else()
  set(DTRAIN_TORCH_HAS_CUDA 0)
endif()
# LibTorch's own flags carry its C++ ABI (-D_GLIBCXX_USE_CXX11_ABI=...). Abseil, Gloo and GoogleTest
# from Debian use the C++11 ABI: a LibTorch built with the old one cannot link with them.
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  message(FATAL_ERROR
    "LibTorch at ${DTRAIN_TORCH_LIB_DIR} was built with the pre-C++11 ABI "
    "(-D_GLIBCXX_USE_CXX11_ABI=0); the libraries dtrain links (Abseil, Gloo, GoogleTest) use the "
    "C++11 ABI. Use a LibTorch built with the C++11 ABI (pip torch 2.7 and later, Debian's, or "
    "LibTorch's 'cxx11 ABI' zip).")
endif()
set(DTRAIN_TORCH_ORIGIN "${DTRAIN_TORCH_LIB_DIR} (CMake: ${Torch_DIR})")
message(STATUS "dtrain: LibTorch ${Torch_VERSION} from ${DTRAIN_TORCH_LIB_DIR}, "
               "CUDA: ${DTRAIN_TORCH_HAS_CUDA}")
dtrain_system_target(dtrain_tp_torch ${TORCH_LIBRARIES})

configure_file("${PROJECT_SOURCE_DIR}/cmake/torch_config.h.in"
               "${DTRAIN_GENERATED_INCLUDE}/third_party/torch_config.h" @ONLY)
dtrain_system_target(dtrain_tp_torch_config)
target_include_directories(dtrain_tp_torch_config INTERFACE
  $<BUILD_INTERFACE:${DTRAIN_GENERATED_INCLUDE}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/dtrain>)

# --- CUDA and NCCL ----------------------------------------------------------------------------------
include("${CMAKE_CURRENT_LIST_DIR}/cuda.cmake")

# --- Abseil -----------------------------------------------------------------------------------------
find_package(absl CONFIG QUIET)
if(NOT absl_FOUND)
  message(FATAL_ERROR
    "Abseil not found (every part of dtrain uses it): install Debian's libabsl-dev, or point "
    "CMAKE_PREFIX_PATH (or absl_DIR) at an installed Abseil built with C++17 or later.")
endif()
set(_dtrain_absl_targets
  absl::strings absl::str_format absl::status absl::statusor absl::time absl::synchronization
  absl::flags absl::flags_parse absl::flags_usage absl::flags_marshalling absl::flat_hash_map
  absl::flat_hash_set absl::span absl::optional absl::function_ref)
dtrain_system_target(dtrain_tp_absl ${_dtrain_absl_targets})

# --- Optional libraries: each leaves out what needs it --------------------------------------------
# dtrain_optional(<target> <what> <consequence> <find_package args...> TARGETS <imported targets>)
macro(dtrain_optional target what consequence)
  cmake_parse_arguments(_opt "" "" "FIND;TARGETS" ${ARGN})
  find_package(${_opt_FIND} QUIET)
  set(_opt_ok TRUE)
  foreach(t IN LISTS _opt_TARGETS)
    if(NOT TARGET ${t})
      set(_opt_ok FALSE)
    endif()
  endforeach()
  if(_opt_ok)
    dtrain_system_target(${target} ${_opt_TARGETS})
  else()
    dtrain_system_missing(${target} "${what}" "${consequence}")
  endif()
endmacro()

dtrain_optional(dtrain_tp_gloo "Gloo"
  "no TCP between CPU ranks on different hosts: backend 'gloo' still connects the ranks of one host (through shared memory), and says that this build has no Gloo when ranks on several hosts ask for it; tests that link the stand-in are left out (install libgloo-dev, or point CMAKE_PREFIX_PATH at a Gloo)"
  FIND Gloo CONFIG TARGETS gloo)

find_package(GTest CONFIG QUIET)
foreach(_lib gtest gtest_main gmock gmock_main)
  if(TARGET GTest::${_lib})
    dtrain_system_target(dtrain_tp_${_lib} GTest::${_lib})
  else()
    dtrain_system_missing(dtrain_tp_${_lib} "GoogleTest"
      "no tests (install libgtest-dev and libgmock-dev, or point CMAKE_PREFIX_PATH at GoogleTest)")
  endif()
endforeach()

find_package(benchmark CONFIG QUIET)
foreach(_lib benchmark benchmark_main)
  if(TARGET benchmark::${_lib})
    dtrain_system_target(dtrain_tp_${_lib} benchmark::${_lib})
  else()
    dtrain_system_missing(dtrain_tp_${_lib} "Google Benchmark" "no benchmarks in bench/")
  endif()
endforeach()

find_package(prometheus-cpp CONFIG QUIET)
foreach(_lib core pull push)
  if(TARGET prometheus-cpp::${_lib})
    dtrain_system_target(dtrain_tp_prometheus_${_lib} prometheus-cpp::${_lib})
  else()
    dtrain_system_missing(dtrain_tp_prometheus_${_lib} "prometheus-cpp"
      "no live metrics endpoint and no Prometheus export")
  endif()
endforeach()

dtrain_optional(dtrain_tp_json "nlohmann_json" "no metrics files and experiment results"
  FIND nlohmann_json CONFIG TARGETS nlohmann_json::nlohmann_json)
dtrain_optional(dtrain_tp_zlib "zlib" "no PNG images" FIND ZLIB TARGETS ZLIB::ZLIB)
dtrain_optional(dtrain_tp_jpeg "libjpeg" "no JPEG images in image folders" FIND JPEG
  TARGETS JPEG::JPEG)
dtrain_optional(dtrain_tp_png "libpng" "no PNG images in image folders" FIND PNG TARGETS PNG::PNG)
