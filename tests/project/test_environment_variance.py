"""The same inputs and params give the same bytes whatever the machine's environment says.

The sample pipeline is built once as usual (`sample_project`) and once more in a fresh copy under
another time zone (UTC-3:30, so a date written from the local clock would differ), the C locale
instead of C.UTF-8, a fixed hash seed instead of a random one, and another umask. Every output file
and dvc.lock must be equal (the LanceDB table by its rows: its own file names are random).
"""

from __future__ import annotations

import pytest

from ..helpers import copy_project, run_ok
from .test_pipeline import OUTPUTS, tree_digest

pytestmark = pytest.mark.e2e

VARIANT = {"TZ": "America/St_Johns", "LC_ALL": "C", "LANG": "C", "PYTHONHASHSEED": "12345"}


def test_outputs_do_not_depend_on_time_zone_locale_hash_seed_or_umask(sample_project, tmp_path):
    repo = copy_project(tmp_path / "variant")
    run_ok(["bash", "-c", "umask 0077 && dvc repro"], repo, env=VARIANT)
    assert tree_digest(*(repo / d for d in OUTPUTS)) == tree_digest(*(sample_project / d for d in OUTPUTS))
    assert (repo / "dvc.lock").read_bytes() == (sample_project / "dvc.lock").read_bytes()
