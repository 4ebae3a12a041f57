# FindNvjpeg: the nvJPEG library, for the optional GPU decode path (STOKER_CUDA).
#
# nvJPEG ships with full CUDA toolkits, but a runtime-only toolkit (and pip-installed CUDA) has it
# only in the PyPI wheel `nvidia-nvjpeg` (CUDA 13: site-packages/nvidia/cu13/{include,lib}) or
# `nvidia-nvjpeg-cu12` (site-packages/nvidia/nvjpeg/{include,lib}). The wheels carry only the
# versioned library (libnvjpeg.so.13), so it is searched for by that name too.
#
# Searched, in order: NVJPEG_ROOT (variable or environment), the CUDA toolkit, the site-packages
# of the project's .venv and of the Python 3 found on PATH.
#
# Defines Nvjpeg_FOUND, Nvjpeg_INCLUDE_DIR, Nvjpeg_LIBRARY and the imported target Nvjpeg::nvjpeg.

set(_nvjpeg_hints)
foreach(root IN ITEMS "${NVJPEG_ROOT}" "$ENV{NVJPEG_ROOT}" "${CUDAToolkit_LIBRARY_ROOT}"
                      "${CUDAToolkit_TARGET_DIR}")
  if(root)
    list(APPEND _nvjpeg_hints "${root}")
  endif()
endforeach()

# Wheels: site-packages/nvidia/{cu13,nvjpeg}.
set(_nvjpeg_site_packages)
file(GLOB _nvjpeg_venv_sp "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages")
list(APPEND _nvjpeg_site_packages ${_nvjpeg_venv_sp})
find_program(_nvjpeg_python NAMES python3)
if(_nvjpeg_python)
  execute_process(COMMAND "${_nvjpeg_python}" -c
                          "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                  OUTPUT_VARIABLE _nvjpeg_purelib OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_nvjpeg_purelib)
    list(APPEND _nvjpeg_site_packages "${_nvjpeg_purelib}")
  endif()
endif()
foreach(sp IN LISTS _nvjpeg_site_packages)
  list(APPEND _nvjpeg_hints "${sp}/nvidia/cu13" "${sp}/nvidia/nvjpeg")
endforeach()

find_path(Nvjpeg_INCLUDE_DIR nvjpeg.h HINTS ${_nvjpeg_hints} PATH_SUFFIXES include)
find_library(Nvjpeg_LIBRARY NAMES nvjpeg libnvjpeg.so.13 libnvjpeg.so.12
             HINTS ${_nvjpeg_hints} PATH_SUFFIXES lib lib64)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Nvjpeg REQUIRED_VARS Nvjpeg_LIBRARY Nvjpeg_INCLUDE_DIR)

if(Nvjpeg_FOUND AND NOT TARGET Nvjpeg::nvjpeg)
  add_library(Nvjpeg::nvjpeg SHARED IMPORTED)
  set_target_properties(Nvjpeg::nvjpeg PROPERTIES
    IMPORTED_LOCATION "${Nvjpeg_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${Nvjpeg_INCLUDE_DIR}")
endif()
mark_as_advanced(Nvjpeg_INCLUDE_DIR Nvjpeg_LIBRARY)
