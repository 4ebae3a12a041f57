// placeholder: being written (helper B replaces this file)
#include "decode/warp.h"
namespace stoker::decode {
void Warp(ImageView, const WarpParams&, MutableImageView) {}
}  // namespace stoker::decode
