# distllm_module(NAME DEPS dep...)
# One static library per folder of src/distllm, built from every .cpp in it.
# Files named *_avx2.cpp are compiled with AVX2+FMA enabled; callers reach them only
# after a run-time CPUID check, so the binary still runs on any x86-64.
function(distllm_module name)
  cmake_parse_arguments(M "" "" "DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  file(GLOB simd_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_avx2.cpp)
  if(simd_srcs)
    set_source_files_properties(${simd_srcs} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
  endif()
  # AVX-512 (F, BW, VL, BF16, VNNI) files: their functions run only where
  # use_avx512() says the CPU and the OS support it.
  file(GLOB avx512_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_avx512.cpp)
  if(avx512_srcs)
    set_source_files_properties(${avx512_srcs} PROPERTIES COMPILE_OPTIONS
      "-mavx512f;-mavx512bw;-mavx512vl;-mavx512bf16;-mavx512vnni;-mfma;-mf16c")
  endif()
  # AMX files (AVX-512 as above plus the AMX tiles): their functions run only where
  # use_amx() says the CPU has AMX and the OS granted it.
  file(GLOB amx_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_amx.cpp)
  if(amx_srcs)
    set_source_files_properties(${amx_srcs} PROPERTIES COMPILE_OPTIONS
      "-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni;-mamx-tile;-mamx-int8;-mfma;-mf16c")
  endif()
  add_library(distllm_${name} STATIC ${srcs})
  target_include_directories(distllm_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(distllm_${name} PUBLIC ${M_DEPS})
endfunction()

# distllm_gtest(NAME DEPS dep... [PREFIX p]): one GoogleTest binary from every
# *_test.cpp in the current folder, each TEST registered with CTest (named p + the
# test's name, so `ctest -R p` selects the folder's tests).
function(distllm_gtest name)
  cmake_parse_arguments(T "" "PREFIX" "DEPS;LABELS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cpp)
  add_executable(test_${name} ${srcs})
  target_link_libraries(test_${name} PRIVATE ${T_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(test_${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(test_${name} PRIVATE
    DISTLLM_SOURCE_DIR="${PROJECT_SOURCE_DIR}" DISTLLM_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(test_${name} DISCOVERY_TIMEOUT 60 TEST_PREFIX "${T_PREFIX}"
    PROPERTIES LABELS "${name};${T_LABELS}" TIMEOUT 120)
endfunction()
