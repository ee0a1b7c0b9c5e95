# Test sources of the plugin system that live outside tests/*_test.cpp: the deliberately broken
# plugins that tests/plugin_check_test.cpp runs the conformance suite on (tests/broken_plugins/,
# registered through KILN_REGISTER_PLUGIN, so they are compiled into kiln_tests itself), and their
# CUDA twins (broken_cuda.cu, CUDA builds only). Included by tests/CMakeLists.txt after
# add_executable(kiln_tests ...).
file(GLOB KILN_BROKEN_PLUGIN_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/broken_plugins/*.cpp)
target_sources(kiln_tests PRIVATE ${KILN_BROKEN_PLUGIN_SOURCES})

if(KILN_HAVE_CUDA)
  # An object library: the .cu must not get kiln_tests' host-compiler warning flags (nvcc rejects
  # -Wall), and object files keep their static registrars (no archive to drop them from).
  add_library(kiln_test_broken_cuda OBJECT ${CMAKE_CURRENT_LIST_DIR}/broken_plugins/broken_cuda.cu)
  target_include_directories(kiln_test_broken_cuda PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(kiln_test_broken_cuda PRIVATE kiln)
  target_sources(kiln_tests PRIVATE $<TARGET_OBJECTS:kiln_test_broken_cuda>)
  target_link_libraries(kiln_tests PRIVATE CUDA::cudart)
  # tests/plugin_authoring_cuda_test.cpp's plugins call the CUDA runtime.
  target_compile_definitions(kiln_tests PRIVATE KILN_TEST_CUDA=1)
endif()

# tests/external_plugin_test.cpp installs this build tree and builds examples/plugins against it.
target_compile_definitions(kiln_tests PRIVATE KILN_BINARY_DIR="${CMAKE_BINARY_DIR}"
                                              KILN_CMAKE_COMMAND="${CMAKE_COMMAND}")
