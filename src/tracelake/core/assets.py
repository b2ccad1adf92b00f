"""Where the project's declarative files live: schemas/ and sql/ at the repository root.

An editable install (the normal case: `uv sync`) reads them from the checkout; a wheel carries
copies under tracelake/_schemas and tracelake/_sql (see pyproject.toml).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_REPO = Path(__file__).resolve().parents[3]


def asset_dir(name: str) -> Path:
    """The `schemas` or `sql` directory."""
    repo = _REPO / name
    if repo.is_dir():
        return repo
    return Path(str(resources.files("tracelake") / f"_{name}"))


def sql(name: str) -> str:
    """The text of sql/<name>.sql."""
    return (asset_dir("sql") / f"{name}.sql").read_text()
