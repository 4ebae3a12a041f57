// placeholder: being written (helper B replaces this file)
#include "decode/resize.h"
namespace stoker::decode {
struct Resizer::Buffers {};
Resizer::Resizer() = default;
Resizer::~Resizer() = default;
void Resizer::Resize(ImageView, const Box&, Interpolation, MutableImageView) {}
}  // namespace stoker::decode
