"""Tables in the docs written from the declarations they describe (the filter rules, the dataset
kinds): a Markdown file holds the table between a begin and an end comment, and the module that owns
the declarations rewrites it (`python -m <module> --docs <file>`); tests hold the docs equal to it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class DocTable:
    what: str  # "filter rules"
    module: str  # the module that writes it: tracelake.curate.filter_rules
    doc: str  # the Markdown file that holds it: docs/curation.md
    table: Callable[[], str]  # the Markdown table

    @property
    def begin(self) -> str:
        return f"<!-- {self.what}: written by `python -m {self.module} --docs {self.doc}` -->"

    @property
    def end(self) -> str:
        return f"<!-- end of {self.what} -->"

    def written_into(self, text: str) -> str:
        """`text` (a Markdown file) with the block between begin and end replaced by the table."""
        start, end = text.find(self.begin), text.find(self.end)
        if start < 0 or end < start:
            raise ValueError(f"no {self.what} block ({self.begin} ... {self.end})")
        return text[: start + len(self.begin)] + "\n" + self.table() + "\n" + text[end:]

    def main(self, argv: list[str] | None = None) -> int:
        ap = argparse.ArgumentParser(description=f"The {self.what}; --docs writes their table into a file.")
        ap.add_argument("--docs", type=Path, help=f"rewrite the {self.what} block of this Markdown file")
        args = ap.parse_args(argv)
        if args.docs:
            args.docs.write_text(self.written_into(args.docs.read_text()))
            print(f"{args.docs}: {self.what} table written")
        else:
            print(self.table())
        return 0


def cell(text: str) -> str:
    """Text for one cell of a Markdown table."""
    return text.replace("|", r"\|")
