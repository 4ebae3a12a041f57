# The manylinux wheel's dependencies (scripts/wheel): static libraries that scripts/wheel-deps
# built for glibc 2.28 into STOKER_DEPS_PREFIX, under the same target names the Debian build's
# find_package/pkg-config give, so nothing else in the build knows which it got.
set(STOKER_DEPS_PREFIX "" CACHE PATH "Where scripts/wheel-deps installed the static libraries")
if(NOT EXISTS "${STOKER_DEPS_PREFIX}/lib/libcurl.a")
  message(FATAL_ERROR "STOKER_STATIC_DEPS: no static libraries in STOKER_DEPS_PREFIX="
                      "'${STOKER_DEPS_PREFIX}': run scripts/wheel-deps first")
endif()
find_package(Threads REQUIRED)

# stoker_static_dependency(TARGET LIBS lib... [INCLUDE subdir...] [DEFINES def...])
function(stoker_static_dependency target)
  cmake_parse_arguments(arg "" "" "LIBS;INCLUDE;DEFINES" ${ARGN})
  set(files)
  foreach(lib IN LISTS arg_LIBS)
    list(APPEND files "${STOKER_DEPS_PREFIX}/lib/lib${lib}.a")
  endforeach()
  set(includes "${STOKER_DEPS_PREFIX}/include")
  foreach(dir IN LISTS arg_INCLUDE)
    list(APPEND includes "${STOKER_DEPS_PREFIX}/include/${dir}")
  endforeach()
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES
    INTERFACE_LINK_LIBRARIES "${files};Threads::Threads;${CMAKE_DL_LIBS}"
    INTERFACE_INCLUDE_DIRECTORIES "${includes}"
    INTERFACE_COMPILE_DEFINITIONS "${arg_DEFINES}")
endfunction()

stoker_static_dependency(fmt::fmt DEFINES FMT_HEADER_ONLY=1)
stoker_static_dependency(CLI11::CLI11)
stoker_static_dependency(OpenSSL::Crypto LIBS crypto)
stoker_static_dependency(PkgConfig::ISAL LIBS isal)
stoker_static_dependency(PkgConfig::XXHASH LIBS xxhash)
stoker_static_dependency(PkgConfig::LIBARCHIVE LIBS archive z bz2 lzma zstd lz4)
stoker_static_dependency(PkgConfig::URING LIBS uring)
stoker_static_dependency(PkgConfig::LIBJPEG LIBS jpeg)
stoker_static_dependency(PkgConfig::LIBPNG LIBS png16 z INCLUDE libpng16)
stoker_static_dependency(PkgConfig::CURL LIBS curl ssl crypto)
stoker_static_dependency(PkgConfig::FUSE3 LIBS fuse3 INCLUDE fuse3)
