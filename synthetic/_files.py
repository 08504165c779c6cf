"""Image files of the import layout: sniff the real type by magic bytes, then decode fully.

A file is accepted only when its first bytes match its extension (an HTML error page saved as
``.png`` is caught here) and the decoder reads every pixel (a truncated file is caught here).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

IMAGE_EXTENSIONS = (".png", ".tif", ".tiff", ".jpg", ".jpeg")
MAX_FILE_BYTES = 256 * 1024**2  # one image file; past this it is refused, not read
_MAGIC = {
    "png": (b"\x89PNG\r\n\x1a\n",),
    "jpeg": (b"\xff\xd8\xff",),
    "tiff": (b"II*\x00", b"MM\x00*"),
}
_EXPECTED = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".tif": "tiff", ".tiff": "tiff"}


class BadFile(Exception):
    """A file that is not what it claims to be; the message says what it looks like."""


def sniff(head: bytes) -> str:
    """The file type its first bytes say (png, jpeg, tiff, html, npy, gzip, pickle...) or 'unknown'."""
    for kind, magics in _MAGIC.items():
        if any(head.startswith(m) for m in magics):
            return kind
    lowered = head[:512].lstrip().lower()
    if lowered.startswith((b"<!doctype html", b"<html", b"<?xml", b"<head", b"<body")):
        return "html"
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head[:1] == b"\x80":
        return "pickle"
    if head[:1] in (b"{", b"["):
        return "json"
    return "unknown"


def _decode_tiff(path: Path) -> np.ndarray:
    import tifffile

    try:
        array: np.ndarray = tifffile.imread(path)
    except Exception as exc:
        raise BadFile(f"cannot decode TIFF ({exc})") from None
    return array


def _decode_pil(path: Path) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(path) as img:
            img.load()
            if img.mode in ("RGB", "RGBA"):
                rgb = np.asarray(img.convert("RGB"))
                if not (np.array_equal(rgb[..., 0], rgb[..., 1]) and np.array_equal(rgb[..., 1], rgb[..., 2])):
                    raise BadFile(f"colour image (mode {img.mode}); X-ray images must be greyscale")
                return rgb[..., 0]
            if img.mode not in ("L", "I;16", "I;16B", "I", "1"):
                raise BadFile(f"unsupported image mode {img.mode}; use 8- or 16-bit greyscale")
            return np.asarray(img)
    except BadFile:
        raise
    except Exception as exc:
        raise BadFile(f"cannot decode ({type(exc).__name__}: {exc})") from None


def read_image(path: Path) -> np.ndarray:
    """Pixels of an import-layout file as a 2-D array (uint8 or uint16); BadFile otherwise."""
    expected = _EXPECTED.get(path.suffix.lower())
    if expected is None:
        raise BadFile(f"extension {path.suffix!r} is not one of {', '.join(IMAGE_EXTENSIONS)}")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise BadFile(f"{size} bytes is over the per-file limit of {MAX_FILE_BYTES}")
    with open(path, "rb") as handle:
        head = handle.read(1024)
    found = sniff(head)
    if found != expected:
        raise BadFile(f"named {path.suffix} but its bytes look like {found} (magic {head[:8].hex()})")
    array = _decode_tiff(path) if expected == "tiff" else _decode_pil(path)
    if array.ndim != 2:
        raise BadFile(f"expected one greyscale plane, got shape {array.shape}")
    if array.dtype == np.bool_:
        array = array.astype(np.uint8)
    if array.dtype not in (np.uint8, np.uint16):
        raise BadFile(f"pixel type {array.dtype} is not 8- or 16-bit unsigned")
    return array


def to_unit(array: np.ndarray) -> np.ndarray:
    """8- or 16-bit pixels -> float32 in [0, 1]."""
    scale = 255.0 if array.dtype == np.uint8 else 65535.0
    return (array.astype(np.float32) / np.float32(scale)).astype(np.float32)
