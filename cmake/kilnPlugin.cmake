# kiln_add_plugin(): builds a kiln plugin library (a shared library that `kiln --plugins` and
# kiln::load_plugin_library load) against the installed kiln, so that a plugin project's
# CMakeLists.txt is find_package(kiln) plus one call. Installed next to kilnConfig.cmake, which
# includes it; documented in docs/writing-a-plugin.md, section 6.
#
#   kiln_add_plugin(<name> SOURCES <file.cpp>... [CUDA_SOURCES <file.cu>...])
#
# makes the SHARED library target <name> (lib<name>.so) from SOURCES, linked to kiln::kiln, with
# C++20 and position-independent code. CUDA_SOURCES are compiled when the installed kiln has the
# CUDA backend (KILN_HAVE_CUDA, from kilnConfig.cmake) and KILN_PLUGIN_WITH_CUDA is ON (its
# default): CUDA is enabled, kernels are built for the architectures kiln was built for unless
# CMAKE_CUDA_ARCHITECTURES is set, the CUDA runtime is the shared one (the one kiln uses, so the
# plugin and kiln see the same streams and device state), and the sources compile with C++20,
# -lineinfo (for profilers, at no run-time cost) and --expt-relaxed-constexpr (constexpr host
# functions such as std::numeric_limits in device code). The target then has the definition
# KILN_PLUGIN_WITH_CUDA=1, which the plugin's C++ code tests to declare and call its kernels.
# Without CUDA the CUDA_SOURCES are left out (said in a status message): the plugin has its CPU
# kernels only and must not claim CUDA in supports_format_combination.
#
# The target is an ordinary one: add sources, definitions, libraries or install rules to it as
# usual. Call kiln_add_plugin from directory scope (not from inside a function): enabling a
# language is a directory-scope operation, which is also why kiln_add_plugin is a macro.
if(CMAKE_VERSION VERSION_LESS 3.20)
  message(FATAL_ERROR "kiln_add_plugin needs CMake 3.20 or newer (this is ${CMAKE_VERSION})")
endif()

if(NOT DEFINED KILN_HAVE_CUDA)
  set(KILN_HAVE_CUDA OFF)
endif()
option(KILN_PLUGIN_WITH_CUDA "kiln_add_plugin: compile the plugins' CUDA_SOURCES (needs a kiln with CUDA)"
       ${KILN_HAVE_CUDA})

macro(kiln_add_plugin _kiln_plugin_name)
  _kiln_plugin_wants_cuda(_kiln_plugin_cuda ${_kiln_plugin_name} ${ARGN})
  if(_kiln_plugin_cuda)
    _kiln_plugin_enable_cuda(${_kiln_plugin_name})
  endif()
  _kiln_plugin_add_target(${_kiln_plugin_name} ${_kiln_plugin_cuda} ${ARGN})
  unset(_kiln_plugin_cuda)
endmacro()

# Sets <out> to ON when <name>'s CUDA_SOURCES are to be compiled; checks the arguments.
function(_kiln_plugin_wants_cuda out name)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "" "SOURCES;CUDA_SOURCES")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kiln_add_plugin(${name}): unexpected arguments '${arg_UNPARSED_ARGUMENTS}' "
                        "(usage: kiln_add_plugin(<name> SOURCES <file.cpp>... [CUDA_SOURCES <file.cu>...]))")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "kiln_add_plugin(${name}): no SOURCES: give the C++ files that define the plugin, "
                        "its creator and KILN_REGISTER_PLUGIN")
  endif()
  set(wants OFF)
  if(arg_CUDA_SOURCES AND KILN_PLUGIN_WITH_CUDA)
    if(NOT KILN_HAVE_CUDA)
      message(FATAL_ERROR "kiln_add_plugin(${name}): KILN_PLUGIN_WITH_CUDA is ON but the kiln found at "
                          "${kiln_DIR} has no CUDA backend, so it could never run these kernels: build kiln "
                          "with CUDA, or configure with -DKILN_PLUGIN_WITH_CUDA=OFF")
    endif()
    set(wants ON)
  elseif(arg_CUDA_SOURCES)
    message(STATUS "kiln_add_plugin(${name}): CUDA_SOURCES left out (KILN_PLUGIN_WITH_CUDA=OFF or the installed "
                   "kiln has no CUDA backend): CPU kernels only")
  endif()
  set(${out} ${wants} PARENT_SCOPE)
endfunction()

# Enables CUDA in the calling directory, once, the way kiln's own build does.
macro(_kiln_plugin_enable_cuda _kiln_plugin_name_for_messages)
  if(NOT CMAKE_CUDA_COMPILER_LOADED)
    include(CheckLanguage)
    check_language(CUDA)
    if(NOT CMAKE_CUDA_COMPILER)
      message(FATAL_ERROR "kiln_add_plugin(${_kiln_plugin_name_for_messages}): the installed kiln has the CUDA "
                          "backend, so the CUDA_SOURCES are compiled, but no CUDA compiler was found: install the "
                          "CUDA toolkit (or pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc), or build the CPU kernels "
                          "only with -DKILN_PLUGIN_WITH_CUDA=OFF")
    endif()
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # The architectures kiln itself was compiled for: the plugin runs wherever kiln does.
      if(KILN_CUDA_ARCHITECTURES)
        set(CMAKE_CUDA_ARCHITECTURES ${KILN_CUDA_ARCHITECTURES})
      else()
        set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 90-virtual)
      endif()
    endif()
    enable_language(CUDA)
  endif()
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    # CMake before 3.26 does not know C++20 for nvcc 13; kiln's headers need it.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  if(NOT TARGET CUDA::cudart)
    find_package(CUDAToolkit REQUIRED)
  endif()
endmacro()

function(_kiln_plugin_add_target name with_cuda)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "" "SOURCES;CUDA_SOURCES")
  add_library(${name} SHARED ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE kiln::kiln)
  set_target_properties(${name} PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON
                                           POSITION_INDEPENDENT_CODE ON)
  if(with_cuda)
    target_sources(${name} PRIVATE ${arg_CUDA_SOURCES})
    set_target_properties(${name} PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON
                                             CUDA_RUNTIME_LIBRARY Shared)
    target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo --expt-relaxed-constexpr>)
    target_compile_definitions(${name} PRIVATE KILN_PLUGIN_WITH_CUDA=1)
    target_link_libraries(${name} PRIVATE CUDA::cudart)
  endif()
endfunction()
