"""`tracelake show ID --trained`: what LLaMA-Factory trains on in a trajectory's SFT export row, in
each of its training modes (tokens/templates.py MODES), counted with the export's own tokenizer.

The row is taken from the smallest SFT export that holds the trajectory; its template and tokenizer
are the ones that export's manifest records (the tokenizer file must be the one it fingerprinted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
from rich.console import Console
from rich.text import Text

from tracelake.core.errors import BadInput
from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest
from tracelake.core.ui import literal, printable
from tracelake.explore.show import fold


def export_row(lake: Path | str, trajectory_id: str) -> dict[str, Any]:
    """The trajectory's row in the smallest SFT export holding it, with `scale`, `dataset_id`,
    `template` and `tokenizer` (the path its manifest names); BadInput when no export holds it."""
    exports = Lake(lake).built_sft_exports()
    if not exports:
        raise BadInput(f"show --trained: {lake} has no SFT export: run `dvc repro`")
    for scale, directory in sorted(exports.items(), key=lambda kv: _rows(kv[1])):
        manifest = read_manifest(directory)
        files = [str(directory / f) for f in manifest["counts"]["files"]]
        found = (
            duckdb.connect()
            .execute(
                "SELECT system, conversations, n_tokens FROM read_parquet($files) WHERE trajectory_id = $id LIMIT 1",
                {"files": files, "id": trajectory_id},
            )
            .fetchall()
        )
        if found:
            system, conversations, n_tokens = found[0]
            params = manifest.get("params", {})
            return {
                "scale": scale,
                "dataset_id": manifest["dataset_id"],
                "template": params.get("template"),
                "cutoff_len": params.get("cutoff_len"),
                "mode": manifest["counts"].get("rendering", {}).get("mode", "default"),  # the one it trains in
                "tokenizer": params.get("export_sft", {}).get("tokenizer"),
                "tokenizer_sha256": manifest.get("inputs", {}).get("tokenizer"),
                "system": system or "",
                "conversations": conversations,
                "n_tokens": n_tokens,
            }
    raise BadInput(f"show --trained: {trajectory_id} is in no SFT export ({', '.join(sorted(exports))})")


def _rows(directory: Path) -> int:
    return read_manifest(directory)["counts"]["rows_out"]


def _encoder(row: dict[str, Any]):
    """len(ids) of a text with the export's tokenizer, each distinct text encoded once."""
    from tracelake.tokens.tokenizer import load_tokenizer, tokenizer_fingerprint

    path = row["tokenizer"]
    if not path or not Path(path).exists():
        raise BadInput(f"show --trained: the export's tokenizer {path!r} is not here (run from the project root)")
    if row["tokenizer_sha256"] and tokenizer_fingerprint(path) != row["tokenizer_sha256"]:
        raise BadInput(f"show --trained: {path} is not the tokenizer {row['dataset_id']} was counted with")
    tokenizer, seen = load_tokenizer(path), {}

    def count(text: str) -> int:
        if text not in seen:
            seen[text] = len(tokenizer.encode(text, add_special_tokens=False).ids)
        return seen[text]

    return count


def trained_counts(row: dict[str, Any], count) -> dict[str, int]:
    """Mode name -> tokens LLaMA-Factory trains on in that mode."""
    from tracelake.tokens.sharegpt import SharegptRow
    from tracelake.tokens.templates import MODES, template_slots, trained_tokens

    slots = template_slots(row["template"])
    sharegpt = SharegptRow(system=row["system"], conversations=list(row["conversations"]), merged=0, trimmed=0)
    return {name: trained_tokens(sharegpt, slots, mode, count, row.get("cutoff_len")) for name, mode in MODES.items()}


def render_trained(
    lake: Path | str, trajectory_id: str, console: Console, mode: str | None = None, full: bool = False
) -> dict[str, int]:
    """Print the row's rendering in `mode` (None: the export's own), trained pieces bold green, the rest dim (long prompt pieces
    folded unless `full`), after one line of trained tokens per mode; those counts."""
    from tracelake.tokens.sharegpt import SharegptRow
    from tracelake.tokens.templates import lf_mode, render_segments, template_slots

    row = export_row(lake, trajectory_id)
    mode = mode or row["mode"]  # by default, the mode the export trains in (train.sft.mode and thinking)
    chosen = lf_mode(mode)
    count = _encoder(row)
    counts = trained_counts(row, count)
    console.print(
        Text.assemble(
            literal(trajectory_id, "bold"),
            " in ",
            literal(f"{row['dataset_id']} (sft_{row['scale']}), template {row['template']}"),
            f": {row['n_tokens']:,} tokens",
        )
    )
    console.print(
        "trained tokens by LLaMA-Factory mode: "
        + ", ".join(
            f"{'[bold]' if name == mode else ''}{name} {n:,}{'[/bold]' if name == mode else ''}"
            for name, n in counts.items()
        ),
        highlight=False,
    )
    how = "the v1 data engine (USE_V1=1)" if chosen.v1 else f"LLaMA-Factory args {chosen.lf_args()}"
    cut = f"; v1 cuts at cutoff_len {row['cutoff_len']:,}" if chosen.v1 and row.get("cutoff_len") else ""
    console.print(f"mode {mode}: {how}{cut}; [bold green]trained[/], [dim]not trained[/]\n", highlight=False)
    sharegpt = SharegptRow(system=row["system"], conversations=list(row["conversations"]), merged=0, trimmed=0)
    text = Text()
    for seg in render_segments(sharegpt, template_slots(row["template"]), chosen):
        shown = printable(seg.text)
        if seg.trained:
            text.append(shown, style="bold green")
        else:
            text.append(shown if full else fold(shown), style="dim")
    console.print(text)
    return counts
