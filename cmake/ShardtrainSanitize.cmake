# SHARDTRAIN_SANITIZE: every shardtrain object is built with ASan + UBSan, and every UBSan finding
# aborts (CI must fail on it). LibTorch, Open MPI and HDF5 stay uninstrumented system/wheel
# libraries; tests/sanitize/ holds the runtime options and the narrow suppressions they need.
# SHARDTRAIN_FUZZ adds libFuzzer's coverage instrumentation on top, so that one clang build
# serves both the sanitized tests and the fuzz targets (scripts/sanitize.sh).
if(SHARDTRAIN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "SHARDTRAIN_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  set(SHARDTRAIN_SANITIZE ON CACHE BOOL "" FORCE)
endif()
if(SHARDTRAIN_SANITIZE)
  set(_st_san -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    list(APPEND _st_san -gline-tables-only)  # file:line in reports at a fraction of -g's cost
  else()
    list(APPEND _st_san -g1)
  endif()
  add_compile_options(${_st_san})
  add_link_options(-fsanitize=address,undefined)
  if(SHARDTRAIN_FUZZ)
    add_compile_options(-fsanitize=fuzzer-no-link)
  endif()
  # -O1 keeps stack traces readable and compiles faster than -O2/-O3; the sanitizers need no more.
  string(REGEX REPLACE "-O[0-9s]" "-O1" CMAKE_CXX_FLAGS_RELEASE "${CMAKE_CXX_FLAGS_RELEASE}")
  string(REGEX REPLACE "-O[0-9s]" "-O1" CMAKE_C_FLAGS_RELEASE "${CMAKE_C_FLAGS_RELEASE}")
  message(STATUS "shardtrain: ASan + UBSan build with ${CMAKE_CXX_COMPILER_ID}, fuzz targets: ${SHARDTRAIN_FUZZ}")
endif()
