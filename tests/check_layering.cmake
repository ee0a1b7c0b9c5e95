# The source layering that keeps a runtime-only library possible (ctest source_layering):
#   src/plan     planning shared by the builder and the runtime: includes neither
#   src/engine   the runtime and the engine format: never includes the builder
#   src/builder  may write engine files (engine_format.h) but includes no runtime internals
# Usage: cmake -DKILN_SOURCE_DIR=<repo> -P tests/check_layering.cmake
set(_rules
    "src/plan|src/builder/"
    "src/plan|src/engine/"
    "src/engine|src/builder/"
    "src/builder|src/engine/context"
    "src/builder|src/engine/engine_impl"
    "src/builder|src/engine/graph_cache"
    "src/builder|src/engine/shape_plan_cache"
    "src/builder|src/engine/bindings")
set(_failures "")
foreach(_rule IN LISTS _rules)
  string(REPLACE "|" ";" _parts "${_rule}")
  list(GET _parts 0 _folder)
  list(GET _parts 1 _forbidden)
  file(GLOB_RECURSE _files "${KILN_SOURCE_DIR}/${_folder}/*.h" "${KILN_SOURCE_DIR}/${_folder}/*.cpp"
       "${KILN_SOURCE_DIR}/${_folder}/*.cu" "${KILN_SOURCE_DIR}/${_folder}/*.cuh")
  foreach(_file IN LISTS _files)
    file(STRINGS "${_file}" _includes REGEX "^#include \"${_forbidden}")
    if(_includes)
      file(RELATIVE_PATH _rel "${KILN_SOURCE_DIR}" "${_file}")
      string(APPEND _failures "  ${_rel}: ${_includes} (${_folder} must not include ${_forbidden}*)\n")
    endif()
  endforeach()
endforeach()
if(_failures)
  message(FATAL_ERROR "source layering broken:\n${_failures}")
endif()
message(STATUS "source layering: ok")
