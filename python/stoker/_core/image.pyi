"""Single-image decode and transform operations"""

from typing import Annotated

import numpy
from numpy.typing import NDArray


def info(data: bytes, max_pixels: int = 67108864) -> dict:
    """
    The header of a JPEG or PNG: {format, width, height, components, progressive}.
    """

def decode(data: bytes, region: tuple[int, int, int, int] | None = None, min_size: tuple[int, int] | None = None, max_pixels: int = 67108864) -> tuple:
    """
    Decodes JPEG/PNG bytes to (pixels (H, W, 3) uint8, info with 'scale' and 'origin': image = source * scale - origin). region=(x, y, w, h) asks for part of the image; min_size=(w, h) allows DCT scaling while the region stays at least that big.
    """

def resize(pixels: Annotated[NDArray[numpy.uint8], dict(shape=(None, None, None), order='C', device='cpu', writable=False)], size: tuple[int, int], box: tuple[float, float, float, float] | None = None, interpolation: str = 'bilinear') -> Annotated[NDArray[numpy.uint8], dict(shape=(None, None, None))]:
    """
    Resamples box (x0, y0, x1, y1) of pixels to size (w, h), as PIL's Image.resize does.
    """

def warp(pixels: Annotated[NDArray[numpy.uint8], dict(shape=(None, None, None), order='C', device='cpu', writable=False)], angle: float, zoom: float = 1.0, fill: tuple[int, int, int] = (0, 0, 0), interpolation: str = 'nearest') -> Annotated[NDArray[numpy.uint8], dict(shape=(None, None, None))]:
    """
    Rotates by `angle` degrees (counter-clockwise) and zooms about the centre, as torchvision's affine transforms do for PIL images.
    """
