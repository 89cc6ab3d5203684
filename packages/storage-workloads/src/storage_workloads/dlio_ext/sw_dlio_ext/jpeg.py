"""JPEG files of the declared size.

DLIO 2.0.0 saves a ``sqrt(record) x sqrt(record)`` noise image as JPEG, which compresses it:
its files come out 40 to 45% smaller than ``record_length``, and a dataset sized on the record
length (the 5x host-memory rule) is that much smaller on disk. This generator draws each
file's size around ``record_length`` (``record_length_stdev``), encodes a greyscale noise image
whose JPEG is a little smaller (the bytes per pixel learnt from the files before it), and adds
comment segments of random bytes after the start-of-image marker up to the exact size. Decoders
(PIL in DLIO's image reader) skip comments, so the files read as the image they hold.
"""

from __future__ import annotations

import io

import numpy as np
from dlio_benchmark.data_generator.data_generator import DataGenerator
from dlio_benchmark.utils.utility import progress
from PIL import Image
from sw_dlio_ext._dlio import file_rng, partial_path, replace_into, require_local_storage, sizes_for
from sw_dlio_ext.formats import jpeg_pixels_for, pad_jpeg

#: Aim this much below the target before padding, so that one encode usually suffices.
_UNDERSHOOT = 0.97


def encode_noise(width: int, height: int, rng: np.random.Generator) -> bytes:
    pixels = rng.integers(0, 256, size=(height, width), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels, mode="L").save(buf, format="JPEG")
    return buf.getvalue()


def sized_jpeg(
    target: int, rng: np.random.Generator, bytes_per_pixel: float
) -> tuple[bytes, float]:
    """A JPEG of exactly ``target`` bytes (or the smallest 8 x 8 one, if that is larger) and
    the bytes per pixel of its image data."""
    bpp = bytes_per_pixel
    data = b""
    for attempt in range(1, 7):
        width, height = jpeg_pixels_for(int(target * _UNDERSHOOT**attempt), bpp)
        data = encode_noise(width, height, rng)
        bpp = len(data) / (width * height)
        extra = target - len(data)
        if extra == 0 or extra >= 4:
            return pad_jpeg(data, target, rng.bytes), bpp
        if width * height <= 64:
            break
    return data, bpp  # the smallest image is larger than the target: keep it


class SizedJPEGGenerator(DataGenerator):
    def generate(self) -> None:
        super().generate()
        require_local_storage(self._args, "the jpeg generator")
        bpp = 0.6  # greyscale noise at PIL's default quality; refined by every file
        for i in range(self.my_rank, int(self.total_files_to_generate), self.comm_size):
            progress(i + 1, self.total_files_to_generate, "Generating JPEG data")
            path = self.storage.get_uri(self._file_list[i])
            target = int(sizes_for(self._args, 1, i)[0])
            data, bpp = sized_jpeg(target, file_rng(i), bpp)
            tmp = partial_path(path)
            with open(tmp, "wb") as fh:
                fh.write(data)
            replace_into(tmp, path)
