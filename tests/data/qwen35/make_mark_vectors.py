#!/usr/bin/env python3
"""make_mark_vectors.py -- ids of text full of combining marks (Thai, Arabic
harakat, Hebrew points, Devanagari, emoji with variation selectors, accents
after punctuation) under Qwen3.5's pre-tokenizer and the Qwen3 vocabulary,
for tests/test_tokenizer_qwen35.c, made by an implementation of its own:
Python's `regex` module for the Split pattern (tokenizer_pipeline.json),
unicodedata for NFC, GPT-2's byte alphabet, and merges by rank over
.deps/qwen3-tokenizer/tokenizer.json. llama.cpp's strings
(ggml-vocab-qwen35.gguf.inp) hardly tell Qwen3.5's regex from Qwen3's on
this vocabulary; these do, and the script checks that itself.

Run by hand (never by the build or the tests), from the repository root:

    python3 tests/data/qwen35/make_mark_vectors.py   # writes mark_vectors.txt beside it

Before writing, it checks its own tokenizer against llama.cpp's .inp/.out
(without NFC, as llama.cpp runs). Each line of mark_vectors.txt: the text
(UTF-8, "\\\\" and "\\xNN" escapes for backslash and control bytes), a tab,
the ids under Qwen3.5's pipeline (NFC, its regex), a tab, the ids under
Qwen3's regex (same vocabulary and NFC).
"""
import json
import os
import sys
import unicodedata

import regex

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
SEP = "\n__ggml_vocab_test__\n"

TEXTS = [
    "สวัสดีครับ ผมชื่ออเล็กซ์",
    "ภาษาไทยมีวรรณยุกต์ ่ ้ ๊ ๋",
    "مَرْحَبًا بِالْعَالَمِ",
    "السَّلَامُ عَلَيْكُمْ",
    "שָׁלוֹם עֲלֵיכֶם",
    "नमस्ते दुनिया, क्या हाल है?",
    "हिन्दी में लिखा गया वाक्य",
    "Tie\u0302\u0301ng Vie\u0323\u0302t co\u0301 da\u0302\u0301u",
    "!\u0301 ?\u0300 .\u0302x",
    "a\u0308\u0304b c\u0327\u0327",
    "\u263a\ufe0f \u2764\ufe0f\u200d\U0001f525 \u0031\ufe0f\u20e3",
    "x\u20dd y\u20de z\u0489",
    "\u0915\u093f\u0924\u093e\u092c\u0947\u0902 \u0b95\u0bc1\u0bb4\u0ba8\u0bcd\u0ba4\u0bc8",
    "\u1780\u17b6\u1793\u17cb\u178f\u17c2 \u0f56\u0f7c\u0f51\u0f0b",
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Bpe:
    def __init__(self, tok):
        model = tok["model"]
        self.vocab = model["vocab"]
        self.ranks = {}
        for i, m in enumerate(model["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            self.ranks[(a, b)] = i
        self.b2u = bytes_to_unicode()

    def piece(self, text):
        word = [self.b2u[b] for b in text.encode("utf-8")]
        while len(word) > 1:
            best = min(range(len(word) - 1), key=lambda i: self.ranks.get((word[i], word[i + 1]), 1 << 60))
            if (word[best], word[best + 1]) not in self.ranks:
                break
            word[best:best + 2] = [word[best] + word[best + 1]]
        return [self.vocab[w] for w in word]

    def encode(self, text, pattern, nfc):
        if nfc:
            text = unicodedata.normalize("NFC", text)
        ids = []
        for m in regex.finditer(pattern, text):
            ids += self.piece(m.group(0))
        return ids


def escape(s):
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ord(ch) < 0x20:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    return "".join(out)


def main():
    tok = json.load(open(os.path.join(ROOT, ".deps", "qwen3-tokenizer", "tokenizer.json"), encoding="utf-8"))
    pipe = json.load(open(os.path.join(HERE, "tokenizer_pipeline.json"), encoding="utf-8"))
    qwen35 = pipe["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    qwen3 = tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    bpe = Bpe(tok)
    inp = open(os.path.join(HERE, "ggml-vocab-qwen35.gguf.inp"), encoding="utf-8").read().split(SEP)[:-1]
    out = open(os.path.join(HERE, "ggml-vocab-qwen35.gguf.out"), encoding="utf-8").read().split("\n")
    for i, s in enumerate(inp):
        want = [int(x) for x in out[i].split()]
        got = bpe.encode(s, qwen35, False)
        if got != want:
            sys.exit("llama.cpp's case %d %r: %s, not %s" % (i, s, got, want))
    lines, n_differ = [], 0
    for s in TEXTS:
        a, b = bpe.encode(s, qwen35, True), bpe.encode(s, qwen3, True)
        n_differ += a != b
        lines.append("%s\t%s\t%s\n" % (escape(s), " ".join(map(str, a)), " ".join(map(str, b))))
    if n_differ < 4:
        sys.exit("only %d of %d texts tell the regexes apart" % (n_differ, len(TEXTS)))
    with open(os.path.join(HERE, "mark_vectors.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("# made by tests/data/qwen35/make_mark_vectors.py (Python %s, regex %s, Unicode %s)\n" % (
            sys.version.split()[0], regex.__version__, unicodedata.unidata_version))
        f.writelines(lines)
    print("llama.cpp's %d cases reproduced; mark_vectors.txt: %d texts, %d where the regexes differ" % (
        len(inp), len(TEXTS), n_differ))


if __name__ == "__main__":
    main()
