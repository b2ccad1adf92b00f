"""Placeholder torchaudio for a machine without one (tests/gpu/device_checks.sh puts it on PYTHONPATH only
when `import torchaudio` fails): LLaMA-Factory 0.9.5 imports torchaudio at start-up (data/mm_plugin.py)
but needs it only for audio data. Same placeholder as training/setup-env.sh writes on a CPU machine."""


def __getattr__(name):
    raise ImportError(f"torchaudio.{name}: torchaudio is not installed here (placeholder from tests/gpu/stubs)")
