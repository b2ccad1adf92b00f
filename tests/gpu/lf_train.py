"""Run `llamafactory-cli train CONFIG` in this process and report what the device did.

    <python with LLaMA-Factory> tests/gpu/lf_train.py CONFIG.yaml RESULT.json [--modules MODULES.json]

LLaMA-Factory's own command line entry (llamafactory.cli.main) runs the training: on one device it
calls run_exp() in this process, so the peak GPU memory read afterwards is the run's. RESULT.json:
{"wall_s", "device", "cuda", "peak_gpu_mem_bytes", "peak_gpu_reserved_bytes", "versions"}.
--modules writes the distributions of every module the run imported (to size a wheel set).
Imports nothing from tracelake: it runs in the training environment.
"""

from __future__ import annotations

import json
import sys
import time


def distributions_loaded() -> dict[str, str]:
    """distribution -> version of every top-level module loaded now."""
    import importlib.metadata as md

    by_module = md.packages_distributions()
    out: dict[str, str] = {}
    for name in sorted({m.split(".")[0] for m in list(sys.modules)}):
        for dist in by_module.get(name, []):
            try:
                out[dist] = md.version(dist)
            except md.PackageNotFoundError:
                out[dist] = "?"
    return dict(sorted(out.items()))


def main() -> None:
    args = sys.argv[1:]
    modules = None
    if "--modules" in args:
        i = args.index("--modules")
        modules = args[i + 1]
        del args[i : i + 2]
    config, result = args
    import torch

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    sys.argv = ["llamafactory-cli", "train", config]
    from llamafactory.cli import main as lf_main

    started = time.perf_counter()
    lf_main()
    wall = time.perf_counter() - started
    import llamafactory
    import transformers

    info = {
        "wall_s": round(wall, 2),
        "cuda": cuda,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "peak_gpu_mem_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "peak_gpu_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "transformers": transformers.__version__,
            "llamafactory": llamafactory.__version__,
        },
    }
    with open(result, "w") as f:
        json.dump(info, f, indent=2)
    if modules:
        with open(modules, "w") as f:
            json.dump(distributions_loaded(), f, indent=2)


if __name__ == "__main__":
    main()
