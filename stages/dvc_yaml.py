"""Write dvc.yaml from the stage declarations (stages/*.py):

    python -m stages.dvc_yaml            rewrite dvc.yaml
    python -m stages.dvc_yaml --check    exit 1, saying what differs, when dvc.yaml is out of date

Each stage's deps are its code digest (stages/code.py: the import closure of `python -m stages NAME`,
with the params code of the sections it reads, and the SQL and schemas that code loads, hashed file by
file by the `code` stage) and the data it declares; its params are the entries it declares (whole
sections, tracked whole). A test checks that the committed dvc.yaml is what this writes, so adding a
knob touches one place. Sources and scales are not copied here: their stages iterate params.yaml's
`sources` and `scales` (`foreach`), so adding one is an edit of params.yaml and `dvc repro`. What
params.yaml decides here is only whether `synth` is a stage (a source or the decontamination root
reads the embedded sample), and then which stages depend on its record.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import re
import sys
import textwrap
from pathlib import Path, PurePosixPath

import yaml

from stages import NAMES, code, declared
from stages.closure import ROOT, closure
from tracelake.core.stage import Stage, headline_path
from tracelake.params import SECTION_HOMES, load_params, section_root

HEADER = """\
# The pipeline, written by `python -m stages.dvc_yaml` from the stage declarations in stages/: edit
# those and run it again (a test fails when this file is out of date). ingest iterates params.yaml's
# sources and select, export_sft its scales: adding one is an edit of params.yaml, then `dvc repro`.
# Each stage runs as `python -m stages NAME [KEY]`; its deps are its code digest (.tracelake/code/
# <stage>.txt, written by `code`: the modules it imports, the params code of its sections, the SQL and
# schemas it loads) and its data; it tracks whole params sections, so any edit in a section reruns
# the stage and its check stops on an unknown key.
#   code -> every stage;  synth -> scan -> ingest@<source> -> score, dedup -> filter -> select@<scale> -> export_sft@<scale>
#   tokenizer -> filter;  ingest@<source> -> export_rl;  export_sft@<scale>, export_rl -> train_config;  report;  check
# synth and scan run at every `dvc repro` (always_changed): scan lists each source's files into
# .tracelake/scan/<source>.json, which ingest depends on in place of them (DVC walks no source).
"""


_PARSED: dict[Path, dict] = {}  # the parsed project per root, shared by every stage of one run


def code_deps(stage: Stage, root: Path = ROOT) -> list[str]:
    """The project files running the stage imports or loads, as repository paths, sorted."""
    homes = {SECTION_HOMES[section_root(p)] for p in (*stage.params, *stage.untracked)}
    entries = [root / "stages" / "__main__.py", root / "stages" / f"{stage.name}.py"]
    for module in sorted(homes):  # importing a.b.c runs a/__init__.py and a/b/__init__.py first
        parts = module.split(".")
        entries += [root / "src" / Path(*parts[:i]) / "__init__.py" for i in range(1, len(parts))]
        entries.append(root / "src" / Path(*parts).with_suffix(".py"))
    return collapse(sorted(closure(entries, root, resolvers=_PARSED.setdefault(root, {})).files), root)


def collapse(files: list[str], root: Path = ROOT) -> list[str]:
    """A package directory stands for its modules when the stage needs every one of them."""
    deps = set(files)
    for package in sorted({str(Path(f).parent) for f in files if f.endswith(".py")}, key=len):
        modules = {
            p.relative_to(root).as_posix() for p in (root / package).rglob("*.py") if "__pycache__" not in p.parts
        }
        if not modules <= deps:  # a module is missing, or a directory above already stands for them
            continue
        deps = {d for d in deps if not d.startswith(package + "/")} | {package}
    return sorted(deps)


def reads_sample(inputs: list[str], sample: str) -> bool:
    """True when an input (a source's traces or tasks, the decontamination root) lies under the
    embedded sample's directory (synth.out)."""
    root = PurePosixPath(sample)
    return any(PurePosixPath(p) == root or root in PurePosixPath(p).parents for p in inputs)


def code_stage_lines() -> list[str]:
    """The `code` stage (stages/code.py): every stage's code digest, from the directories code lives in."""
    return [
        "  code:",
        "    # each stage's code (its modules, SQL and schemas) -> .tracelake/code/<stage>.txt, the digest",
        "    # every stage depends on in place of its files: a code change reruns exactly its stages.",
        "    cmd: python -m stages.code",
        *_block("deps", list(code.WATCHED), "    "),
        "    outs:",
        f"      - {code.OUT}",
    ]


def _block(key: str, items: list[str], indent: str) -> list[str]:
    return [f"{indent}{key}:", *(f"{indent}  - {item}" for item in items)] if items else []


def stage_lines(stage: Stage, root: Path = ROOT) -> list[str]:
    lines = [f"  {stage.name}:"]
    doc = re.sub(r"^Stage `[^`]+`: ", "", " ".join(stage.doc.split()).split(". ")[0].rstrip("."))
    lines += [f"    # {line}" for line in textwrap.wrap(doc + ".", 96)]
    ind = "    "
    key = ""
    if stage.foreach:
        lines += [f"    foreach: ${{{stage.foreach}}}", "    do:"]
        ind, key = "      ", " ${key}"
    lines.append(f"{ind}cmd: python -m stages {stage.name}{key}")
    lines += _block("deps", [code.digest_path(stage.name), *stage.deps], ind)
    lines += _block("params", list(stage.params), ind)
    outs = list(stage.outs)
    # the counts file is an output kept in git; only its headline is a DVC metrics file (core/stage.py)
    uncached = [
        *stage.outs_uncached,
        *([stage.plots] if stage.plots else []),
        *([stage.metrics] if stage.metrics else []),
    ]
    if outs or uncached:
        lines.append(f"{ind}outs:")
        lines += [f"{ind}  - {o}" for o in outs]
        keep = f"\n{ind}      persist: true" if stage.always_run else ""  # the stage rewrites what changed
        lines += [f"{ind}  - {o}:\n{ind}      cache: false{keep}" for o in uncached]
    if stage.always_run:
        lines.append(f"{ind}always_changed: true")
    if stage.headline:
        lines += [f"{ind}metrics:", f"{ind}  - {headline_path(stage.metrics)}:", f"{ind}      cache: false"]
    return lines


def render(params_file: Path = Path("params.yaml"), root: Path = ROOT) -> str:
    params = load_params(params_file, ("sources", "synth", "decontaminate"))
    lines = [HEADER.rstrip("\n"), "stages:", *code_stage_lines(), ""]
    # the stages that read the embedded sample, which synth makes (its output is a record of it, not
    # the files: they come after synth by depending on that record)
    readers = {
        "scan": reads_sample([p for s in params.sources.values() for p in (s.path, s.tasks)], params.synth.out),
        "dedup": reads_sample([params.decontaminate.root], params.synth.out),
    }
    for name in NAMES:
        if name == "synth" and not any(readers.values()):
            continue  # nothing reads the embedded sample: DVC need not build it
        stage = declared(name)
        if readers.get(name):
            stage = dataclasses.replace(stage, deps=(*stage.deps, *declared("synth").outs_uncached))
        lines += stage_lines(stage, root)
        lines.append("")
    report = importlib.import_module("stages.report")
    lines.append("plots:")
    for file, (template, x, y, title) in report.PLOT_SPECS.items():
        lines += [
            f"  - {report.PLOTS}/{file}:",
            f"      template: {template}",
            f"      x: {x}",
            f"      y: {y}",
            f"      title: {title}",
        ]
    text = "\n".join(lines) + "\n"
    yaml.safe_load(text)  # well-formed, whatever the declarations hold
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stages.dvc_yaml", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when dvc.yaml is out of date")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", default="dvc.yaml")
    args = parser.parse_args(argv)
    text, out = render(Path(args.params)), Path(args.out)
    old = out.read_text() if out.is_file() else ""
    if args.check:
        if old == text:
            return 0
        diff = difflib.unified_diff(old.splitlines(), text.splitlines(), str(out), "generated", lineterm="", n=1)
        print("\n".join(list(diff)[:80]))
        print(f"{out} is out of date with the stage declarations: run `python -m stages.dvc_yaml`", file=sys.stderr)
        return 1
    if old != text:
        out.write_text(text)
    print(f"{out}: {len(NAMES)} stages" + ("" if old != text else " (unchanged)"))
    return 0


if __name__ == "__main__":
    from tracelake.core.stage import run_stage

    run_stage(lambda: sys.exit(main()))
