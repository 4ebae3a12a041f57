# The C++ package: `cmake --install build --prefix P` puts the public headers (include/stoker/),
# one shared library (libstoker.so, holding every layer the headers reach) and a CMake package
# under P, so a C++ user writes
#
#   find_package(stoker CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE stoker::stoker)
#
# (examples/cpp/, built and run against an install by the ctest CppPackage.ExampleBuildsAndReads).
# One shared library rather than the dozen static layers: a user links one thing, and the
# layers' own dependencies (curl, OpenSSL, libarchive, ISA-L …) stay the library's business.
#
# `pip install .` (scikit-build) builds the Python package from the same tree: it installs the
# CLI and the extension, not the C++ package.
if(SKBUILD)
  return()
endif()
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

add_library(stoker_cpp SHARED src/package/version.cc)
target_compile_definitions(stoker_cpp PRIVATE STOKER_VERSION="${PROJECT_VERSION}")
target_compile_options(stoker_cpp PRIVATE ${STOKER_WARNINGS})
target_include_directories(stoker_cpp PRIVATE ${PROJECT_SOURCE_DIR}/include)
add_library(stoker::stoker ALIAS stoker_cpp)
set_target_properties(stoker_cpp PROPERTIES OUTPUT_NAME stoker EXPORT_NAME stoker
                      VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
# Every object of the layers behind include/stoker/ (status.h: common; storage.h: the storage
# backends and OpenStorage; dataset.h: dataset), whether or not the headers name it.
target_link_libraries(stoker_cpp PRIVATE
  "$<LINK_LIBRARY:WHOLE_ARCHIVE,stoker_common,stoker_storage,stoker_format,stoker_net,stoker_s3,stoker_node_client,stoker_storage_uri,stoker_dataset>")
target_include_directories(stoker_cpp INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(stoker_cpp INTERFACE cxx_std_23)

install(TARGETS stoker_cpp EXPORT stokerTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/stoker DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT stokerTargets NAMESPACE stoker:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/stoker)
configure_package_config_file(cmake/stokerConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/stokerConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/stoker)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/stokerConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/stokerConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/stokerConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/stoker)

# Installs this build into a scratch prefix, builds examples/cpp against it with find_package,
# and runs it on a dataset the CLI packs. Not in a sanitizer build: the example, built as a
# user would, has no sanitizer runtime for the library to load into.
if(STOKER_TESTS AND NOT STOKER_SANITIZE)
  add_test(NAME CppPackage.ExampleBuildsAndReads
           COMMAND bash ${PROJECT_SOURCE_DIR}/examples/cpp/test_install.sh
                   ${CMAKE_BINARY_DIR} $<TARGET_FILE:stoker>)
  set_tests_properties(CppPackage.ExampleBuildsAndReads PROPERTIES TIMEOUT 600 LABELS full)
endif()
