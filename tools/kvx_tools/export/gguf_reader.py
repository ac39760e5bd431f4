"""gguf's GGUFReader, three times faster to open a file with a large vocabulary.

GGUFReader makes a numpy view of its np.memmap for every value it parses: for Gemma 3's 262,144 tokens (and
their scores and types) about 800,000 slices, each of which runs np.memmap's __array_finalize__. Opening
gemma-3-270m-q4_k_m.gguf took 22 s, nearly all of it there. FastGGUFReader slices a plain ndarray view of the
same mapping instead (7.4 s): the fields and tensors are the same values (their arrays are ndarrays over the
same mapped pages, not memmaps), checked by tests/python/test_gguf_reader.py.

It overrides GGUFReader._get, a private method of gguf-py (0.10 to 0.19 have this signature); if a release
changes it, that test fails.
"""

import numpy as np
from gguf import GGUFReader


class FastGGUFReader(GGUFReader):
    def _get(self, offset, dtype, count=1, override_order=None):
        # self.data is set before the first _get (GGUFReader.__init__ maps the file, then parses it).
        plain = self.__dict__.get("_plain_data")
        if plain is None:
            plain = self.__dict__["_plain_data"] = self.data.view(np.ndarray)
        dtype = np.dtype(dtype)
        count = int(count)
        values = plain[offset:offset + dtype.itemsize * count].view(dtype)[:count]
        return values.view(values.dtype.newbyteorder(self.byte_order if override_order is None else override_order))
