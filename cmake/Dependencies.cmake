# Every dependency comes from Debian packages installed by scripts/setup.sh.
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(MPI REQUIRED COMPONENTS C)
find_package(nlohmann_json 3.10 REQUIRED)

# OpenBLAS: we link the OpenMP build explicitly. Our own parallel loops use OpenMP
# too, so kernels and sgemm share one thread pool instead of two spinning pools
# fighting over the cores (the pthread build's workers spin after every call).
set(DISTLLM_OPENBLAS_DIR /usr/lib/x86_64-linux-gnu/openblas-openmp)
find_library(DISTLLM_OPENBLAS_LIB NAMES libopenblas.so.0 openblas
             PATHS ${DISTLLM_OPENBLAS_DIR} NO_DEFAULT_PATH REQUIRED)
find_path(DISTLLM_CBLAS_INCLUDE cblas.h
          PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/x86_64-linux-gnu
          REQUIRED)
add_library(distllm_openblas INTERFACE)
target_link_libraries(distllm_openblas INTERFACE ${DISTLLM_OPENBLAS_LIB} OpenMP::OpenMP_CXX)
target_include_directories(distllm_openblas SYSTEM INTERFACE ${DISTLLM_CBLAS_INCLUDE})
# The loader must find the OpenMP build before the system default (pthread) one.
set(CMAKE_BUILD_RPATH ${DISTLLM_OPENBLAS_DIR})
set(CMAKE_INSTALL_RPATH ${DISTLLM_OPENBLAS_DIR})
set(CMAKE_BUILD_RPATH_USE_ORIGIN OFF)
# Use DT_RPATH (searched before LD_LIBRARY_PATH and the ld.so cache entry) rather
# than DT_RUNPATH, so the choice above cannot be overridden by accident.
add_link_options(-Wl,--disable-new-dtags)

if(DISTLLM_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(benchmark REQUIRED)
  include(GoogleTest)
endif()
