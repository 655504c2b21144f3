# Finds every dependency strata builds against, all from Debian's packages (the CUDA toolkit and
# NCCL, optional, from /usr/local/cuda). A missing required dependency stops configure with the package to
# install. Sets STRATA_HAVE_CUDA and imported targets used by the libraries.
include(CheckLanguage)
find_package(PkgConfig REQUIRED)

function(strata_missing what package)
  message(FATAL_ERROR "strata needs ${what}, which was not found.\n"
                      "Install it with:  apt-get install -y ${package}\n"
                      "(or run tools/setup.sh, which installs every dependency)")
endfunction()

# --- CPU-side libraries -------------------------------------------------------------------------
pkg_check_modules(LIBURING IMPORTED_TARGET liburing)
if(NOT LIBURING_FOUND)
  strata_missing("liburing" "liburing-dev")
endif()
pkg_check_modules(HWLOC IMPORTED_TARGET hwloc)
if(NOT HWLOC_FOUND)
  strata_missing("hwloc" "libhwloc-dev")
endif()
find_package(TBB QUIET)
if(NOT TBB_FOUND)
  strata_missing("oneTBB" "libtbb-dev")
endif()
find_package(fmt QUIET)
if(NOT fmt_FOUND)
  strata_missing("fmt" "libfmt-dev")
endif()
find_package(spdlog QUIET)
if(NOT spdlog_FOUND)
  strata_missing("spdlog" "libspdlog-dev")
endif()
find_package(nlohmann_json 3.10 QUIET)
if(NOT nlohmann_json_FOUND)
  strata_missing("nlohmann-json" "nlohmann-json3-dev")
endif()
find_package(CLI11 QUIET)
if(NOT CLI11_FOUND)
  strata_missing("CLI11" "libcli11-dev")
endif()
pkg_check_modules(OPENBLAS IMPORTED_TARGET openblas)
if(NOT OPENBLAS_FOUND)
  strata_missing("OpenBLAS (CPU BLAS)" "libopenblas-dev")
endif()
# Protocol buffers (the lite runtime and protoc): TensorBoard's event records (model/train/tensorboard_event.proto).
find_package(Protobuf QUIET)
if(NOT Protobuf_FOUND OR NOT Protobuf_PROTOC_EXECUTABLE OR NOT TARGET protobuf::libprotobuf-lite)
  strata_missing("Protocol Buffers (libprotobuf-lite and protoc)" "libprotobuf-dev protobuf-compiler")
endif()
# MPI (Open MPI): launch, bootstrap and the CPU backend's collectives (runtime/mpi_communicator.h).
find_package(MPI QUIET COMPONENTS C)
if(NOT MPI_C_FOUND)
  strata_missing("MPI (Open MPI, for the Communicator)" "libopenmpi-dev openmpi-bin")
endif()
find_program(STRATA_MPIEXEC NAMES mpirun mpiexec HINTS ${MPIEXEC_EXECUTABLE}
             DOC "mpirun for the multi-rank tests (label mpi)")
find_package(Threads REQUIRED)
if(STRATA_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    strata_missing("GoogleTest" "libgtest-dev libgmock-dev")
  endif()
endif()

# --- CUDA ---------------------------------------------------------------------------------------
set(STRATA_HAVE_CUDA OFF)
if(NOT STRATA_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # Default architectures: sm_80 code runs on every Ampere/Ada part (A100, RTX 30xx/40xx),
    # sm_90 on Hopper, and sm_90 PTX is JIT-compiled on newer GPUs. Override with
    # -DCMAKE_CUDA_ARCHITECTURES=native (or a list) for a faster build on a GPU machine.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80-real;90" CACHE STRING "CUDA architectures to compile for")
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 flag; nvcc 12+ accepts -std=c++20.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    # NCCL is optional: without it `strata info` reports it as not built in and the CUDA backend
    # has no communicator beyond a world of one (runtime/cuda/nccl_communicator.h).
    # Looked for in the toolkit, then under NCCL_ROOT (e.g. a Python wheel's nvidia/nccl folder).
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include
              PATHS ${NCCL_ROOT} ENV NCCL_ROOT PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64
                 PATHS ${NCCL_ROOT} ENV NCCL_ROOT PATH_SUFFIXES lib lib64)
    set(STRATA_HAVE_NCCL OFF)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      add_library(strata::nccl UNKNOWN IMPORTED)
      set_target_properties(strata::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                                                    INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
      set(STRATA_HAVE_NCCL ON)
    else()
      message(STATUS "strata: NCCL not found (install libnccl-dev or set NCCL_ROOT); "
                     "building without it: `strata info` reports NCCL as not built in, and the "
                     "NCCL communicator (multi-GPU runs) is not built")
    endif()
    set(STRATA_HAVE_CUDA ON)
  elseif(STRATA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "STRATA_CUDA=ON but no CUDA compiler (nvcc) was found. Install the CUDA "
                        "toolkit (/usr/local/cuda) or configure with -DSTRATA_CUDA=AUTO|OFF.")
  else()
    message(STATUS "strata: nvcc not found; building without the CUDA backend (STRATA_CUDA=AUTO)")
  endif()
endif()
