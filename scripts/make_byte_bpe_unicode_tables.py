#!/usr/bin/env python3
# Writes framework/text/byte_bpe_unicode_tables.cpp: the Unicode classes that llama.cpp's
# byte-level BPE pre-tokenizers ask of each code point (text/byte_bpe.h): its general
# category's first letter (\p{L}, \p{N}, \p{P}, ... or unassigned) and whether it is
# White_Space (\s), as ranges of code points that share both.
#
# llama.cpp's own table (src/unicode-data.cpp) is built from UnicodeData.txt of Unicode
# 15.1.0 (the version of llama-cpp-python 0.3.36's vendored copy). Python 3.11's
# unicodedata is Unicode 14.0.0: the two differ on the 5,116 code points assigned in
# 15.0 and 15.1 (Kawi, CJK extension I, new emoji, ...), which 14.0 calls unassigned. So
# this script reads the categories from PyPI's unicodedata2 at exactly that version:
#     python3 -m venv /tmp/uvenv && /tmp/uvenv/bin/pip install unicodedata2==15.1.0
#     /tmp/uvenv/bin/python scripts/make_byte_bpe_unicode_tables.py [LLAMA_CPP_SOURCE]
# With the path of a llama.cpp source tree it also reads that tree's src/unicode-data.cpp
# and stops, listing them, if any code point is classed differently there (with 15.1.0
# there are none).
#
# White_Space is not in unicodedata: it is the property list of Unicode's PropList.txt,
# the same since Unicode 6.3, written out below. (Python's str.isspace differs: it also
# takes U+001C..U+001F, which are not White_Space.)
import re
import sys

import unicodedata2 as unicodedata

OUT = "framework/text/byte_bpe_unicode_tables.cpp"
UNICODE_VERSION = "15.1.0"
WHITE_SPACE = set(range(0x09, 0x0E)) | {0x20, 0x85, 0xA0, 0x1680} | set(range(0x2000, 0x200B)) | {
    0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
# The classes, as byte_bpe_unicode_tables.h numbers them.
CLASS = {"Cn": 0, "L": 1, "N": 2, "P": 3, "S": 4, "M": 5, "Z": 6, "C": 7}
WHITESPACE_BIT = 0x8
LLAMA_FLAGS = {0x01: "Cn", 0x02: "N", 0x04: "L", 0x08: "Z", 0x10: "M", 0x20: "P", 0x40: "S", 0x80: "C"}


def code_class(c):
    cat = unicodedata.category(chr(c))
    return CLASS["Cn"] if cat == "Cn" else CLASS[cat[0]]


def llama_classes(tree):
    # src/unicode-data.cpp's unicode_ranges_flags: {start, flags} pairs, each range running
    # to the next start; the low byte of flags is one category bit.
    text = open(tree + "/src/unicode-data.cpp", encoding="utf-8").read()
    body = re.search(r"unicode_ranges_flags = \{[^\n]*\n(.*?)\n\};", text, re.S).group(1)
    pairs = [(int(a, 16), int(b, 16)) for a, b in re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+)\}", body)]
    out = [0] * 0x110000
    for (start, flags), (end, _) in zip(pairs, pairs[1:]):
        for c in range(start, end):
            out[c] = CLASS[LLAMA_FLAGS[flags & 0xFF]]
    return out


def main():
    if unicodedata.unidata_version != UNICODE_VERSION:
        sys.exit("unicodedata2 has Unicode %s; llama.cpp's table is %s (pip install unicodedata2==%s)"
                 % (unicodedata.unidata_version, UNICODE_VERSION, UNICODE_VERSION))
    values = [code_class(c) | (WHITESPACE_BIT if c in WHITE_SPACE else 0) for c in range(0x110000)]
    if len(sys.argv) > 1:
        theirs = llama_classes(sys.argv[1])
        diff = [c for c in range(0x110000) if theirs[c] != values[c] & 7]
        if diff:
            sys.exit("classes differ from llama.cpp's at %d code points: %s"
                     % (len(diff), " ".join("U+%04X" % c for c in diff[:50])))
        print("llama.cpp's table agrees at every code point", file=sys.stderr)
    starts = [0] + [c for c in range(1, 0x110000) if values[c] != values[c - 1]]
    lines = [
        "// Written by scripts/make_byte_bpe_unicode_tables.py (Unicode %s); do not edit by hand." % UNICODE_VERSION,
        "// Each entry: the first code point of a run, and the class of every code point up to",
        "// the next entry's first (byte_bpe_unicode_tables.h).",
        '#include "text/byte_bpe_unicode_tables.h"',
        "",
        "namespace kiln::text::byte_bpe_tables {",
        "",
        "const CodeRun kRuns[] = {",
    ]
    for i in range(0, len(starts), 8):
        lines.append("    " + " ".join("{0x%X, %d}," % (c, values[c]) for c in starts[i:i + 8]))
    lines += ["};", "const size_t kRuns_size = %d;" % len(starts), "", "}  // namespace kiln::text::byte_bpe_tables"]
    with open(OUT, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s: %d runs" % (OUT, len(starts)), file=sys.stderr)


if __name__ == "__main__":
    main()
