# Finds loom's fixed stack and exposes it as one interface target, loom_deps.
# LibTorch: any install through Torch_DIR, else the one inside the python3 `torch` wheel.
if(NOT Torch_DIR)
  execute_process(
    COMMAND python3 -c "import torch; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE torch_found)
  if(NOT torch_found EQUAL 0)
    message(FATAL_ERROR "LibTorch not found: run scripts/setup.sh (installs the pinned torch wheel) "
                        "or pass -DTorch_DIR=/path/to/libtorch/share/cmake/Torch")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${torch_prefix}")
endif()
# The wheel is a CUDA build: its CMake config looks for the CUDA toolkit (present here, no GPU needed).
set(TORCH_CUDA_ARCH_LIST "9.0" CACHE STRING "CUDA arches for LibTorch's CMake config")
find_package(Torch REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)
find_package(yaml-cpp REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
# `loom prepare`: gzip (zlib) and zstd corpora, JSON Lines through simdjson.
find_package(ZLIB REQUIRED)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
find_package(simdjson REQUIRED)
# The byte-level BPE tokenizers: split regexes (PCRE2, with JIT) and Unicode normalization (ICU).
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(ICU REQUIRED IMPORTED_TARGET icu-uc)
# `loom serve`'s HTTP layer: Debian's cpp-httplib (libcpp-httplib-dev: httplib.h and the compiled library; its
# flags define CPPHTTPLIB_OPENSSL_SUPPORT, which changes its classes' layout, so they must come with it). Linked
# into the serve library only (CMakeLists.txt), not into loom_deps.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

# OpenMP: ATen's at::parallel_for (ATen/ParallelOpenMP.h) only runs in parallel in code compiled with it; without
# it loom's own kernels would each run on one thread. LibTorch's libgomp.so.1 is the one loaded at run time.
find_package(OpenMP REQUIRED COMPONENTS CXX)

add_library(loom_deps INTERFACE)
# libstdc++ comes first among the shared libraries: the torch wheel's libtorch.so exports its own copy
# of std::filesystem (built with an older GCC) and, found first, it crashes (remove_all) in our code.
target_link_libraries(loom_deps INTERFACE
  stdc++ ${TORCH_LIBRARIES} OpenMP::OpenMP_CXX MPI::MPI_C yaml-cpp spdlog::spdlog nlohmann_json::nlohmann_json PkgConfig::SENTENCEPIECE
  ZLIB::ZLIB PkgConfig::ZSTD simdjson::simdjson PkgConfig::PCRE2 PkgConfig::ICU)
# LibTorch's include dir carries its own (newer) fmt, which spdlog (built against Debian's fmt) cannot use.
# A directory holding only a link to the system fmt goes first on the include path, so <fmt/...> is
# Debian's everywhere; LibTorch's public headers that loom includes do not need fmt.
find_package(fmt REQUIRED)
get_target_property(fmt_include_dir fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/fmt-first)
file(CREATE_LINK ${fmt_include_dir}/fmt ${CMAKE_BINARY_DIR}/fmt-first/fmt SYMBOLIC)
target_include_directories(loom_deps SYSTEM BEFORE INTERFACE ${CMAKE_BINARY_DIR}/fmt-first)
# LibTorch's headers are not ours: keep -Wall -Wextra for loom's code only.
target_include_directories(loom_deps SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  # NCCL: the one the torch wheel ships (what libtorch_cuda loads), else the CUDA toolkit's.
  get_filename_component(torch_site "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${torch_site}/nvidia/nccl/include ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${torch_site}/nvidia/nccl/lib ${CUDAToolkit_LIBRARY_DIR})
  if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
    message(FATAL_ERROR "LibTorch is a CUDA build but NCCL was not found: install the CUDA toolkit's NCCL")
  endif()
  message(STATUS "loom: CUDA build with NCCL ${NCCL_LIBRARY}")
  set(LOOM_CUDA ON)
  target_compile_definitions(loom_deps INTERFACE LOOM_CUDA=1)
  target_include_directories(loom_deps SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
  target_link_libraries(loom_deps INTERFACE ${NCCL_LIBRARY})
endif()
