# One way to declare libraries and tests, so warnings, sanitizers and include paths are the same
# everywhere.
set(STOKER_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align
    -Wunused -Woverloaded-virtual -Wimplicit-fallthrough)
if(STOKER_WERROR)
  list(APPEND STOKER_WARNINGS -Werror)
endif()

if(STOKER_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# stoker_library(NAME SOURCES ... DEPS ...)
function(stoker_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${STOKER_WARNINGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# stoker_test(NAME SOURCES ... DEPS ...) — a GoogleTest binary registered with ctest, in the
# quick tier (`ctest -L quick`: unit tests, seconds; CONTRIBUTING.md). Tests that install,
# build or start whole programs carry the label `full` instead.
function(stoker_test name)
  if(NOT STOKER_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${STOKER_WARNINGS})
  # Tests that read committed data (tests/data, fuzz/corpus) find it here.
  target_compile_definitions(${name} PRIVATE STOKER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} stoker_testing GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300 LABELS quick)
endfunction()
