// Compiled into libstoker.so only (cmake/StokerPackage.cmake), with the project's version.
#include "stoker/version.h"

namespace stoker {

std::string_view Version() { return STOKER_VERSION; }

}  // namespace stoker
