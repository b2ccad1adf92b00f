"""Fuzzing params.yaml (hypothesis): a random value at any key of the repository's file (any type,
huge integers, non-finite floats, deep nesting, odd strings), unknown keys anywhere, and random bytes
written into the file's text.

Property: `load_params` either returns the params or raises BadParams with one line; no other
exception escapes, whatever the file holds. The bounded variants run in every test run (derandomized,
helpers.FUZZ_EXAMPLES examples); the `long` variants run thousands (TRACELAKE_LONG=1).
"""

from __future__ import annotations

import copy
import math
import sys
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tracelake.core.errors import BadParams
from tracelake.params import load_params

from ..helpers import ROOT, fuzz_settings

BASE_TEXT = (ROOT / "params.yaml").read_text()
BASE = yaml.safe_load(BASE_TEXT)

SHORT = fuzz_settings()
LONG = fuzz_settings(long_examples=3_000)


def _paths(data: Any, at: tuple = ()) -> list[tuple]:
    """Every key path of the file (mappings and list items), the sections themselves included."""
    out = [at] if at else []
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, (*at, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, (*at, i))
    return out


PATHS = _paths(BASE)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**62, max_value=2**200),
    st.integers(min_value=-(2**200), max_value=-(2**62)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["all", "last", "1k", "-", "", "../x", "a b", "\x00", "é", "0x10", "1e30", "~"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4),
    max_leaves=20,
)


def _deep(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def _set(data: Any, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


@st.composite
def mutated_files(draw) -> bytes:
    kind = draw(st.sampled_from(["value", "deep", "unknown_key", "drop", "bytes"]))
    if kind == "bytes":
        text = BASE_TEXT.encode()
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.binary(min_size=1, max_size=12)) + text[at:]
    data = copy.deepcopy(BASE)
    path = draw(st.sampled_from(PATHS))
    if kind == "value":
        _set(data, path, draw(values))
    elif kind == "deep":
        _set(data, path, _deep(draw(st.integers(50, 3000)), draw(scalars)))
    elif kind == "unknown_key":
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        if isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(values)
    else:
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        parent.pop(path[-1])
    return _dump(data)


def _dump(data: Any) -> bytes:
    """YAML of `data`; floats PyYAML cannot write plainly (nan, inf) as YAML's own tokens."""

    class Dumper(yaml.SafeDumper):
        pass

    def floats(dumper: yaml.SafeDumper, value: float) -> yaml.Node:
        if math.isnan(value):
            return dumper.represent_scalar("tag:yaml.org,2002:float", ".nan")
        if math.isinf(value):
            return dumper.represent_scalar("tag:yaml.org,2002:float", ".inf" if value > 0 else "-.inf")
        return dumper.represent_float(value)

    Dumper.add_representer(float, floats)
    Dumper.ignore_aliases = lambda self, data: True
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # the dumper recurses; the file, not the dumper, is under test
    try:
        return yaml.dump(data, Dumper=Dumper, sort_keys=False, allow_unicode=True).encode()
    finally:
        sys.setrecursionlimit(limit)


def _run(tmp_path_factory, content: bytes) -> None:
    """The file loads, or is refused with BadParams in one line; any other exception fails."""
    path = tmp_path_factory.mktemp("params") / "params.yaml"
    path.write_bytes(content)
    try:
        load_params(path)
    except BadParams as e:
        assert "\n" not in str(e), str(e)


@SHORT
@given(content=mutated_files())
def test_fuzz_params_file(tmp_path_factory, content):
    _run(tmp_path_factory, content)


@pytest.mark.long
@LONG
@given(content=mutated_files())
def test_fuzz_params_file_long(tmp_path_factory, content):
    _run(tmp_path_factory, content)


names = st.one_of(
    st.text(max_size=80),
    st.text(alphabet="abz09-_.", min_size=1, max_size=70),
    st.sampled_from(["-rf", "--help", "_", "a" * 64, "a" * 65, "s" * 300, "ok", "A-1_b"]),
)


@SHORT
@given(name=names)
def test_fuzz_source_names(tmp_path_factory, name):
    """A source named anything: params load exactly when the name is safe as a directory name and a
    command-line argument (core.params.NAME_RULE); else one line naming the name."""
    import re

    data = copy.deepcopy(BASE)
    data["sources"][name] = {"format": "harbor", "path": "p", "tasks": "t"}
    path = tmp_path_factory.mktemp("params") / "params.yaml"
    path.write_bytes(_dump(data))
    safe = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", name) is not None
    try:
        load_params(path, ("sources",))
        assert safe, f"{name!r} passed"
    except BadParams as e:
        assert not safe and "\n" not in str(e) and "must start with a letter or digit" in str(e), str(e)
