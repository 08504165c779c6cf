"""A reader for IDX files (the MNIST / Fashion-MNIST format), plain or gzipped.

Layout: two zero bytes, a type code (0x08 = uint8), the number of dimensions, then one
big-endian uint32 per dimension, then the data in C order. Only uint8 data is accepted.
"""

from __future__ import annotations

import gzip
import struct
from functools import lru_cache
from pathlib import Path

import numpy as np

from segfactory.errors import DataError, UsageError

IDX_UINT8 = 0x08
MAX_IDX_BYTES = 512 * 1024**2  # past this the file is refused as implausible


def read_idx(path: Path) -> np.ndarray:
    """The array stored in an IDX file; raises UsageError if missing, DataError if malformed."""
    if not path.is_file():
        raise UsageError(f"IDX file {path} not found; point --idx at e.g. train-images-idx3-ubyte(.gz)")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) > MAX_IDX_BYTES:
        raise DataError(f"{path}: {len(raw)} bytes is over the IDX limit of {MAX_IDX_BYTES}")
    if len(raw) < 4 or raw[:2] != b"\x00\x00":
        raise DataError(f"{path} is not an IDX file (bad magic {raw[:4].hex()})")
    dtype_code, ndim = raw[2], raw[3]
    if dtype_code != IDX_UINT8:
        raise DataError(f"{path}: IDX type 0x{dtype_code:02x} is not supported; only uint8 (0x08)")
    header = 4 + 4 * ndim
    if ndim == 0 or len(raw) < header:
        raise DataError(f"{path}: truncated IDX header")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    expected = int(np.prod(dims))
    if len(raw) - header != expected:
        raise DataError(
            f"{path}: IDX header promises {expected} bytes of data for shape {dims}, "
            f"found {len(raw) - header}; the file is truncated or corrupt"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


@lru_cache(maxsize=2)
def load_silhouettes(path: Path) -> np.ndarray:
    """(N, H, W) uint8 silhouettes from an IDX images file (a 3-dimensional IDX)."""
    array = read_idx(path)
    if array.ndim != 3 or array.shape[0] == 0:
        raise DataError(f"{path}: expected an IDX images file (N, H, W), got shape {array.shape}")
    return array


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array as IDX (used by tests and by people making tiny fixtures)."""
    data = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, IDX_UINT8, data.ndim]) + struct.pack(f">{data.ndim}I", *data.shape)
    path.write_bytes(header + data.tobytes())
