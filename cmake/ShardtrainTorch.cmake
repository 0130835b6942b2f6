# Finds LibTorch: a standalone LibTorch given through CMAKE_PREFIX_PATH, or the PyPI torch wheel
# in the project venv (scripts/install-deps.sh), or whatever python3 -c 'import torch' finds.
find_path(_st_torch_cfg TorchConfig.cmake PATH_SUFFIXES share/cmake/Torch NO_CMAKE_SYSTEM_PATH)
if(NOT _st_torch_cfg)
  foreach(py ${SHARDTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/.venv/bin/python python3)
    execute_process(COMMAND ${py} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE _st_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE _st_rc ERROR_QUIET)
    if(_st_rc EQUAL 0 AND EXISTS "${_st_prefix}/Torch/TorchConfig.cmake")
      set(_st_torch_cfg "${_st_prefix}/Torch")
      break()
    endif()
  endforeach()
endif()
if(NOT _st_torch_cfg)
  message(FATAL_ERROR "LibTorch not found: run scripts/install-deps.sh, or pass -DCMAKE_PREFIX_PATH=/path/to/libtorch")
endif()
get_filename_component(TORCH_ROOT "${_st_torch_cfg}/../../.." ABSOLUTE)

# A CUDA build of LibTorch (the PyPI wheel is +cu130) needs the CUDA toolkit at configure time.
# Without one we link the CPU half (libtorch_cpu + libc10) directly, which is all a CPU run loads.
file(GLOB _st_torch_cuda "${TORCH_ROOT}/lib/libtorch_cuda.so")
if(_st_torch_cuda AND NOT SHARDTRAIN_HAVE_CUDA)
  message(STATUS "shardtrain: LibTorch at ${TORCH_ROOT} is a CUDA build but no CUDA toolkit: linking its CPU libraries")
  add_library(shardtrain_torch INTERFACE)
  target_include_directories(shardtrain_torch SYSTEM INTERFACE
    ${TORCH_ROOT}/include ${TORCH_ROOT}/include/torch/csrc/api/include)
  target_link_libraries(shardtrain_torch INTERFACE
    ${TORCH_ROOT}/lib/libtorch_cpu.so ${TORCH_ROOT}/lib/libc10.so)
  target_link_options(shardtrain_torch INTERFACE "LINKER:-rpath,${TORCH_ROOT}/lib")
  target_compile_definitions(shardtrain_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
else()
  # Torch's CUDA config replaces CMAKE_CUDA_ARCHITECTURES with nvcc flags for TORCH_CUDA_ARCH_LIST
  # (default: every arch it knows, some of which nvcc 13 refuses): hand it ours (80 90 -> 8.0;9.0).
  if(SHARDTRAIN_HAVE_CUDA AND NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    foreach(arch ${CMAKE_CUDA_ARCHITECTURES})
      if(arch MATCHES "^([0-9]+)([0-9])(-real|-virtual)?$")
        list(APPEND TORCH_CUDA_ARCH_LIST "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
      endif()
    endforeach()
  endif()
  find_package(Torch REQUIRED CONFIG PATHS "${_st_torch_cfg}" NO_DEFAULT_PATH)
  add_library(shardtrain_torch INTERFACE)
  if(_st_torch_cuda AND SHARDTRAIN_HAVE_CUDA)
    # LibTorch's CPU half and c10_cuda (streams, the caching allocator). libtorch_cuda, and the
    # cuBLAS, cuDNN, cuFFT... it needs, load only where a GPU is found (cuda::load_torch_cuda):
    # linked, they loaded in every process, 0.15 s of each start on a machine without one.
    target_link_libraries(shardtrain_torch INTERFACE torch_cpu_library c10_cuda c10)
  else()
    target_link_libraries(shardtrain_torch INTERFACE ${TORCH_LIBRARIES})
  endif()
  target_include_directories(shardtrain_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  separate_arguments(_st_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(shardtrain_torch INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${_st_torch_flags}>)
endif()
# The PyPI wheel's libtorch exports its own (partial) std::filesystem; put libstdc++ first in
# DT_NEEDED so the dynamic linker resolves those symbols to the real library.
target_link_options(shardtrain_torch INTERFACE "LINKER:--push-state,--no-as-needed" "-lstdc++" "LINKER:--pop-state")
if(_st_torch_cuda AND SHARDTRAIN_HAVE_CUDA)  # c10_cuda is linked: the caching allocator's statistics
  target_compile_definitions(shardtrain_torch INTERFACE SHARDTRAIN_TORCH_CUDA=1)
endif()
add_library(shardtrain::torch ALIAS shardtrain_torch)
message(STATUS "shardtrain: LibTorch ${TORCH_ROOT}")
