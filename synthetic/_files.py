"""Image files of the import layout: sniff the real type by magic bytes, then decode fully.

A file is accepted only when its first bytes match its extension (an HTML error page saved as
``.png`` is caught here) and the decoder reads every pixel (a truncated file is caught here).
Besides the pixels, a reader reports the bit depth the file itself declares, where it does:
a PNG's ``sBIT`` chunk, a TIFF's ``BitsPerSample`` below its 16-bit container, a DICOM's
``BitsStored``. Multi-page TIFFs and multi-frame DICOMs are refused (one image per file).
DICOM and DICONDE files need pydicom (the ``dicom`` extra); without it the error says how
to install it or convert the files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

IMAGE_EXTENSIONS = (".png", ".tif", ".tiff", ".jpg", ".jpeg", ".dcm", ".dicom")
MAX_FILE_BYTES = 256 * 1024**2  # one image file; past this it is refused, not read
_MAGIC = {
    "png": (b"\x89PNG\r\n\x1a\n",),
    "jpeg": (b"\xff\xd8\xff",),
    "tiff": (b"II*\x00", b"MM\x00*"),
}
_EXPECTED = {
    ".png": "png",
    ".jpg": "jpeg",
    ".jpeg": "jpeg",
    ".tif": "tiff",
    ".tiff": "tiff",
    ".dcm": "dicom",
    ".dicom": "dicom",
}
_DICOM_MAGIC_AT = 128  # a DICOM file has a 128-byte preamble, then b"DICM"
DICOM_HINT = (
    "install pydicom into segfactory's environment (`pip install 'segfactory[dicom]'`), or convert "
    "each file to a 16-bit greyscale PNG first, e.g. with dcmtk: `dcm2pnm +on2 IN.dcm OUT.png`"
)


class BadFile(Exception):
    """A file that is not what it claims to be; the message says what it looks like."""


def sniff(head: bytes) -> str:
    """The file type its first bytes say (png, jpeg, tiff, html, npy, gzip, pickle...) or 'unknown'."""
    for kind, magics in _MAGIC.items():
        if any(head.startswith(m) for m in magics):
            return kind
    if head[_DICOM_MAGIC_AT : _DICOM_MAGIC_AT + 4] == b"DICM":
        return "dicom"
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


def _decode_tiff(path: Path) -> tuple[np.ndarray, int | None]:
    import tifffile

    try:
        with tifffile.TiffFile(path) as tif:
            pages = len(tif.pages)
            if pages > 1:
                raise BadFile(
                    f"multi-page TIFF ({pages} pages); import takes one image per file: save each "
                    "page as its own .tif (e.g. `tifffile` in Python, or ImageJ's Stack to Images)"
                )
            page = tif.pages.first
            array: np.ndarray = page.asarray()
            bits = int(page.bitspersample)
    except BadFile:
        raise
    except Exception as exc:
        raise BadFile(f"cannot decode TIFF ({exc})") from None
    container = 8 * array.dtype.itemsize
    return array, bits if bits < container else None


def _png_sbit(path: Path) -> int | None:
    """The significant bits a PNG declares in its ``sBIT`` chunk (before the first IDAT), if any."""
    with open(path, "rb") as handle:
        handle.seek(8)
        while len(header := handle.read(8)) == 8:
            length, kind = int.from_bytes(header[:4], "big"), header[4:]
            if kind in (b"IDAT", b"IEND"):
                return None
            data = handle.read(length)
            handle.seek(4, 1)  # the chunk's CRC; the decoder has already checked the file
            if kind == b"sBIT" and data:
                return int(data[0])
    return None


def _decode_dicom(path: Path) -> tuple[np.ndarray, int | None]:
    try:
        import pydicom
    except ImportError:
        raise BadFile(f"DICOM/DICONDE file, and pydicom is not installed: {DICOM_HINT}") from None
    try:
        ds = pydicom.dcmread(path)
        frames = int(getattr(ds, "NumberOfFrames", 1) or 1)
        if frames > 1:
            raise BadFile(f"multi-frame DICOM ({frames} frames); import takes one image per file")
        array: np.ndarray = np.asarray(ds.pixel_array)
        bits = getattr(ds, "BitsStored", None)
    except BadFile:
        raise
    except Exception as exc:
        raise BadFile(
            f"cannot decode DICOM ({type(exc).__name__}: {exc}); a compressed transfer syntax "
            f"needs its pydicom plugin (pylibjpeg), or {DICOM_HINT}"
        ) from None
    return array, int(bits) if bits else None


def _decode_pil(path: Path) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(path) as img:
            img.load()
            if img.mode in ("RGB", "RGBA"):
                rgb = np.asarray(img.convert("RGB"))
                if not (
                    np.array_equal(rgb[..., 0], rgb[..., 1]) and np.array_equal(rgb[..., 1], rgb[..., 2])
                ):
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
    return read_source(path)[0]


def read_source(path: Path) -> tuple[np.ndarray, int | None]:
    """(pixels, the bit depth the file declares or None) of an import-layout file; BadFile otherwise."""
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
    declared: int | None = None
    if expected == "tiff":
        array, declared = _decode_tiff(path)
    elif expected == "dicom":
        array, declared = _decode_dicom(path)
    else:
        array = _decode_pil(path)
        declared = _png_sbit(path) if expected == "png" else None
    if array.ndim != 2:
        raise BadFile(f"expected one greyscale plane, got shape {array.shape}")
    if array.dtype == np.bool_:
        array = array.astype(np.uint8)
    if array.dtype not in (np.uint8, np.uint16):
        raise BadFile(f"pixel type {array.dtype} is not 8- or 16-bit unsigned")
    container = 8 * array.dtype.itemsize
    return array, declared if declared is not None and 1 <= declared <= container else None


def to_unit(array: np.ndarray) -> np.ndarray:
    """8- or 16-bit pixels -> float32 in [0, 1]."""
    scale = 255.0 if array.dtype == np.uint8 else 65535.0
    return (array.astype(np.float32) / np.float32(scale)).astype(np.float32)
