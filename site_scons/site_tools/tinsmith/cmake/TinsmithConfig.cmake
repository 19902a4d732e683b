# find_package(Tinsmith): generate a model's C++ sources at build time and compile them as a
# static library, with one call:
#
#   find_package(Tinsmith REQUIRED)
#   tinsmith_add_model(kws GRAPH models/kws.yaml [TARGET cortex-m4] [OUTPUT_DIR dir])
#   target_link_libraries(firmware PRIVATE kws)
#
# CMake finds this file in the virtual environment Tinsmith is installed in (its share/cmake/
# folder, through PATH when the environment is active), or where -DTinsmith_DIR=... points:
# `tinsmith include-dir --cmake` prints the folder. The generator runs again only when the
# graph or a weight file it reads changes (a depfile names them), and rewrites only the files
# whose bytes change, so an edit that changes nothing recompiles nothing.
#
# TARGET is the core the model is generated for (its kernels, workspace and code size are that
# core's); it defaults to the cache variable TINSMITH_TARGET (host-dispatch).
include_guard(GLOBAL)
cmake_minimum_required(VERSION 3.20)

set(TINSMITH_TARGET host-dispatch CACHE STRING "Tinsmith target models are generated for (host-dispatch, host, cortex-m4, ...)")

# The Python of the environment this file was installed into (<prefix>/share/cmake/Tinsmith),
# else the one CMake finds.
get_filename_component(_tinsmith_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TINSMITH_PYTHON)
  foreach(_tinsmith_candidate "${_tinsmith_prefix}/bin/python3" "${_tinsmith_prefix}/Scripts/python.exe")
    if(EXISTS "${_tinsmith_candidate}")
      set(TINSMITH_PYTHON "${_tinsmith_candidate}")
      break()
    endif()
  endforeach()
endif()
if(NOT TINSMITH_PYTHON)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  set(TINSMITH_PYTHON "${Python3_EXECUTABLE}")
endif()
set(TINSMITH_PYTHON "${TINSMITH_PYTHON}" CACHE FILEPATH "Python that runs Tinsmith")
set(TINSMITH_COMMAND "${TINSMITH_PYTHON}" -m tinsmith)

execute_process(COMMAND ${TINSMITH_COMMAND} include-dir OUTPUT_VARIABLE Tinsmith_INCLUDE_DIR
                ERROR_VARIABLE _tinsmith_error RESULT_VARIABLE _tinsmith_failed OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_tinsmith_failed)
  set(Tinsmith_FOUND FALSE)
  set(Tinsmith_NOT_FOUND_MESSAGE
      "${TINSMITH_PYTHON} cannot run Tinsmith: ${_tinsmith_error}Activate the virtual environment Tinsmith is "
      "installed in before running CMake (or pass -DTINSMITH_PYTHON=/path/to/venv/bin/python), then delete "
      "the build folder.")
  return()
endif()
execute_process(COMMAND ${TINSMITH_COMMAND} --version OUTPUT_VARIABLE _tinsmith_version
                OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REGEX REPLACE "^tinsmith " "" Tinsmith_VERSION "${_tinsmith_version}")

# tinsmith_add_model(NAME GRAPH file [TARGET core] [OUTPUT_DIR dir]): a static library NAME
# holding the model of `file` (graph YAML, .onnx or .tflite), with the generated headers and
# tinsmith/buffer.hpp on its public include path.
function(tinsmith_add_model name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "GRAPH;TARGET;OUTPUT_DIR" "")
  if(NOT ARG_GRAPH)
    message(FATAL_ERROR "tinsmith_add_model(${name}): GRAPH is required (the graph YAML, .onnx or .tflite file)")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tinsmith_add_model(${name}): unexpected arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_TARGET)
    set(ARG_TARGET "${TINSMITH_TARGET}")
  endif()
  get_filename_component(graph "${ARG_GRAPH}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  if(NOT ARG_OUTPUT_DIR)
    set(ARG_OUTPUT_DIR "${CMAKE_CURRENT_BINARY_DIR}/tinsmith/${name}")
  endif()
  # The generated files are named after the graph's name, which the graph file states.
  execute_process(COMMAND ${TINSMITH_COMMAND} generate "${graph}" --print-name -o "${ARG_OUTPUT_DIR}"
                  OUTPUT_VARIABLE model ERROR_VARIABLE error RESULT_VARIABLE failed
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(failed)
    message(FATAL_ERROR "tinsmith_add_model(${name}): ${error}")
  endif()
  set(out "${ARG_OUTPUT_DIR}")
  add_custom_command(
    OUTPUT "${out}/${model}.stamp"
    BYPRODUCTS "${out}/${model}.cpp" "${out}/${model}.hpp" "${out}/${model}.h"
    COMMAND ${TINSMITH_COMMAND} generate "${graph}" -o "${out}" --target "${ARG_TARGET}" --library-only
            --stamp "${out}/${model}.stamp" --depfile "${out}/${model}.d"
    DEPENDS "${graph}"
    DEPFILE "${out}/${model}.d"
    COMMENT "Generating the ${model} model for ${ARG_TARGET}"
    VERBATIM)
  add_library(${name} STATIC "${out}/${model}.cpp" "${out}/${model}.stamp")
  target_include_directories(${name} PUBLIC "${out}" "${Tinsmith_INCLUDE_DIR}")
  target_compile_features(${name} PUBLIC cxx_std_17)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${name} PRIVATE -fno-exceptions -fno-rtti)
  endif()
  if(UNIX OR CMAKE_CROSSCOMPILING)
    target_link_libraries(${name} PUBLIC m)
  endif()
endfunction()
