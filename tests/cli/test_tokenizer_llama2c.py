"""kvx's llama2.c tokenizer against an independent Python implementation of llama2.c's encoder
(run.c's algorithm: dummy-prefix space, one piece per UTF-8 code point or byte fallback <0xNN> = byte + 3,
then merge the best-scoring adjacent pair until none is in the vocabulary), on a varied corpus."""
import os
import random
import struct
import unittest

from kvx_cli import SOURCE_DIR, run

TOKENIZER = os.path.join(SOURCE_DIR, "testdata", "models", "stories260K", "tok512.bin")


def load_vocab(path):
    pieces, scores = [], []
    with open(path, "rb") as f:
        f.read(4)  # max_token_length
        while header := f.read(8):
            score, length = struct.unpack("<fi", header)
            pieces.append(f.read(length))
            scores.append(score)
    return pieces, scores


def reference_encode(text, pieces, scores, bos=1):
    index = {}
    for i, p in enumerate(pieces):
        index.setdefault(p, i)
    ids = [bos]
    if not text:
        return ids
    ids.append(index[b" "])
    for ch in text:
        raw = ch.encode("utf-8")
        if raw in index:
            ids.append(index[raw])
        else:
            ids.extend(b + 3 for b in raw)
    while True:
        best = None
        for i in range(1, len(ids) - 1):
            merged = pieces[ids[i]] + pieces[ids[i + 1]]
            j = index.get(merged)
            if j is not None and (best is None or scores[j] > best[0]):
                best = (scores[j], i, j)
        if best is None:
            return ids
        _, i, j = best
        ids[i:i + 2] = [j]


def corpus(pieces):
    rng = random.Random(2024)
    words = [p.decode("utf-8", "replace").strip() for p in pieces[259:] if p.strip()]
    extra = ["é", "ü", "ß", "中文", "日本語", "😀", "👍🏽", "\t", "\n", "  ", "   ", "'s", "n't", "123", "4.5",
             "{", "}", "()", "->", "==", "#include", "x = y + 1;", "\"quoted\"", "—", "…", "naïve café"]
    texts = ["", " ", "a", "Once upon a time", "Lily and Ben", "Hello, world!", "\n\n", "  leading", "trailing  "]
    for _ in range(400):
        n = rng.randint(1, 12)
        parts = [rng.choice(words if rng.random() < 0.75 else extra) for _ in range(n)]
        sep = rng.choice([" ", "", "  ", "\n", " ", " "])
        texts.append(sep.join(parts))
    return texts


class Llama2cTokenizerTest(unittest.TestCase):
    def test_agrees_with_the_reference_encoder(self):
        pieces, scores = load_vocab(TOKENIZER)
        self.assertEqual(len(pieces), 512)
        # Under the sanitizers (KVX_SANITIZED) every fifth text: the path from command line to ids under ASan,
        # with a fifth of the 409 processes; the plain run compares them all.
        step = 5 if os.environ.get("KVX_SANITIZED") == "1" else 1
        for text in corpus(pieces)[::step]:
            expected = reference_encode(text, pieces, scores)
            code, out, err = run("tokenize", "-p", text)
            self.assertEqual(code, 0, err)
            got = [int(t) for t in out.strip().split(",")]
            self.assertEqual(got, expected, repr(text))


if __name__ == "__main__":
    unittest.main()
