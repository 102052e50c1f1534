# cnn_add_module(NAME <dir> [DEPS cnn_x ...] [PUBLIC_LIBS ...] [PRIVATE_LIBS ...] [PRIVATE_INCLUDES ...])
# Builds lib/<dir>/ into the static library cnn_<dir>. Files are selected by suffix, so the
# layering rules of the README's Building section hold without #ifdef: *.cu, *_cuda.cpp and *_cudnn.cpp need CNN_WITH_CUDA,
# *_sm90a.cu need sm_90 among the CUDA architectures (*_nosm90a.cpp stands in otherwise),
# <base>_nocuda.cpp stands in for <base>_cuda.cu/.cpp without CUDA (or while that file is absent), *_opencv.cpp needs CNN_WITH_OPENCV (*_noopencv.cpp stands in), *_mpi.cpp needs CNN_WITH_MPI, *_nccl.cpp needs both,
# *_onnx.cpp needs CNN_WITH_ONNX (*_noonnx.cpp stands in).
function(cnn_filter_sources out)
  set(kept)
  foreach(f IN LISTS ARGN)
    get_filename_component(stem "${f}" NAME_WE)
    get_filename_component(ext "${f}" LAST_EXT)
    if(stem MATCHES "_nocuda$" AND CNN_WITH_CUDA)
      # A stand-in stays in a CUDA build only while there is no <base>_cuda.cu/.cpp to replace it.
      get_filename_component(dir "${f}" DIRECTORY)
      string(REGEX REPLACE "_nocuda$" "" base "${stem}")
      if(EXISTS "${dir}/${base}_cuda.cu" OR EXISTS "${dir}/${base}_cuda.cpp")
        continue()
      endif()
    endif()
    if((ext STREQUAL ".cu" OR stem MATCHES "_(cuda|cudnn)$" OR f MATCHES "/cudnn/") AND NOT CNN_WITH_CUDA)
      continue()
    endif()
    # *_sm90a.cu build in their own object library (lib/CMakeLists.txt); *_nosm90a.cpp stand in for
    # them in CUDA builds without sm_90.
    if(stem MATCHES "_sm90a$")
      continue()
    endif()
    if(stem MATCHES "_nosm90a$" AND (NOT CNN_WITH_CUDA OR CNN_WITH_SM90A))
      continue()
    endif()
    # <stem>_<dep>.cpp needs CNN_WITH_<DEP>; <stem>_no<dep>.cpp stands in without it.
    set(skip FALSE)
    foreach(dep opencv onnx)
      string(TOUPPER "${dep}" DEP)
      if((stem MATCHES "_no${dep}$" AND CNN_WITH_${DEP}) OR (stem MATCHES "_${dep}$" AND NOT CNN_WITH_${DEP}))
        set(skip TRUE)
      endif()
    endforeach()
    if(skip)
      continue()
    endif()
    if(stem MATCHES "_mpi$" AND NOT CNN_WITH_MPI)
      continue()
    endif()
    if(stem MATCHES "_nccl$" AND NOT (CNN_WITH_MPI AND CNN_WITH_CUDA))
      continue()
    endif()
    list(APPEND kept "${f}")
  endforeach()
  set(${out} "${kept}" PARENT_SCOPE)
endfunction()

function(cnn_add_module)
  cmake_parse_arguments(M "" "NAME" "DEPS;PUBLIC_LIBS;PRIVATE_LIBS;PRIVATE_INCLUDES" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS
       "${PROJECT_SOURCE_DIR}/lib/${M_NAME}/*.cpp" "${PROJECT_SOURCE_DIR}/lib/${M_NAME}/*.cu")
  cnn_filter_sources(srcs ${srcs})
  if(NOT srcs)
    add_library(cnn_${M_NAME} INTERFACE)
    target_include_directories(cnn_${M_NAME} INTERFACE "${PROJECT_SOURCE_DIR}/lib")
    target_link_libraries(cnn_${M_NAME} INTERFACE ${M_DEPS} ${M_PUBLIC_LIBS})
    return()
  endif()
  add_library(cnn_${M_NAME} STATIC ${srcs})
  target_include_directories(cnn_${M_NAME} PUBLIC "${PROJECT_SOURCE_DIR}/lib")
  target_link_libraries(cnn_${M_NAME} PUBLIC ${M_DEPS} ${M_PUBLIC_LIBS} PRIVATE ${M_PRIVATE_LIBS})
  if(M_PRIVATE_INCLUDES)
    target_include_directories(cnn_${M_NAME} PRIVATE ${M_PRIVATE_INCLUDES})
  endif()
  target_compile_options(cnn_${M_NAME} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
  if(CNN_WITH_CUDA)
    set_target_properties(cnn_${M_NAME} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  endif()
endfunction()

# cnn_add_test_suite(<dir> DEPS ...): tests/<dir>/*.cpp into the executable test_<dir>,
# each Catch2 test case registered with CTest.
function(cnn_add_test_suite dir)
  cmake_parse_arguments(T "" "" "DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tests/${dir}/*.cpp")
  cnn_filter_sources(srcs ${srcs})
  if(NOT srcs)
    return()
  endif()
  add_executable(test_${dir} ${srcs})
  target_link_libraries(test_${dir} PRIVATE cnn_test_support ${T_DEPS})
  target_compile_options(test_${dir} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  # --warn NoTests: a name the filter cannot match (CMake cuts a test name at a ';') fails instead of
  # running nothing and passing.
  catch_discover_tests(test_${dir} TEST_PREFIX "${dir}: " EXTRA_ARGS --warn NoTests
                       PROPERTIES SKIP_RETURN_CODE 4
                       ENVIRONMENT "CNN_BUILD_DIR=${PROJECT_BINARY_DIR};CNN_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
