# strata_add_library(NAME DIR [DEPS ...] [GLOBS ...]): one static library per layer directory from
# the sources found by GLOBS (default DIR/*.cc). A layer with no sources yet becomes an INTERFACE
# library carrying the same include path and dependencies, so the layers above link uniformly.
function(strata_add_library name)
  cmake_parse_arguments(ARG "" "" "GLOBS;DEPS" ${ARGN})
  if(NOT ARG_GLOBS)
    set(ARG_GLOBS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  endif()
  file(GLOB sources CONFIGURE_DEPENDS ${ARG_GLOBS})
  if(sources)
    add_library(${name} STATIC ${sources})
    set(scope PUBLIC)
  else()
    add_library(${name} INTERFACE)
    set(scope INTERFACE)
  endif()
  target_include_directories(${name} ${scope} ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} ${scope} strata::flags ${ARG_DEPS})
  set(${name}_SOURCES ${sources} PARENT_SCOPE)
endfunction()

# strata_unity_skip(FILES...): keeps these sources (relative to the calling directory) out of unity
# builds (-DCMAKE_UNITY_BUILD=ON, which tools/test.sh's sanitizer stages use to cut their compile
# time), for a source whose file-local names (an anonymous-namespace helper or constant) collide
# with a sibling's in the same target. A plain build ignores the property. Which batch a source
# lands in changes as sources come and go: configuring with -DCMAKE_UNITY_BUILD_BATCH_SIZE=0 (one
# batch per target) shows every collision at once.
function(strata_unity_skip)
  set_source_files_properties(${ARGN} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()
