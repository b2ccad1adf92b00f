"""The embedded sample corpus: `tracelake.sample.synth.synthesize` writes it (see synth.py).

synth.py (orchestration, manifest), tasks.py (task directories), trials.py (trial plans),
harbor.py and atif.py (Harbor jobs, trials, ATIF trajectories), traces.py (the trace table),
faults.py (injected faults), text.py (the text), common.py (seeded randomness, file writing).
Imports only from itself and tracelake.core.
"""
