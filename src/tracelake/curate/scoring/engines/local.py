"""vLLM or transformers on this machine, in a worker process (worker.py) started with the
interpreter of the environment that holds the engine.

The default interpreter (core/envs.py): for transformers, the training environment (it has torch
and transformers); for vllm, the vLLM environment (`bash scoring/setup-vllm-env.sh` makes a CPU one;
on a GPU machine, point score.model.python at any environment with vllm).
The worker starts only when there is something to answer: a run whose answers are all cached
loads no model.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import IO, Iterable, Iterator, cast

import orjson

from tracelake.core.envs import ENVIRONMENTS, env_dir, env_program
from tracelake.core.errors import BadInput, BadParams
from tracelake.curate.scoring.engines import Answer, Engine, Failure, GenRequest, Sample

WORKER = Path(__file__).with_name("worker.py")
ENVIRONMENT = {"transformers": "training", "vllm": "vllm"}  # backend -> its default environment


def engine_python(backend: str, python: str | None) -> Path:
    """The interpreter that runs `backend`'s worker: score.model.python, else the default
    environment's, checked to exist."""
    if python is not None:
        path = Path(python)
        if not path.is_file():
            raise BadParams(f"params.yaml: score.model.python {python} does not exist")
        return path
    kind = ENVIRONMENT[backend]
    path = env_program(kind, "python")
    if path is None:
        variable, _, setup = ENVIRONMENTS[kind]
        raise BadParams(
            f"score.model.backend {backend}: no {env_dir(kind)}/bin/python (set score.model.python to "
            f"an interpreter with {backend} installed, or ${variable}; `{setup}` makes one)"
        )
    return path


class LocalEngine(Engine):
    """The worker as a subprocess: requests on its stdin, protocol lines on its stdout (lines that do
    not start with `prefix` are not the protocol's: a launcher's own output), its log on stderr."""

    prefix = b""
    env: dict[str, str] = {}

    def __init__(self, *, backend: str, python: Path, model_path: str, batch_size: int, max_model_len: int | None):
        super().__init__()
        self.backend, self.python, self.model_path = backend, python, model_path
        self.batch_size, self.max_model_len = batch_size, max_model_len
        self.label = f"{backend} {model_path}"

    def _command(self) -> list[str]:
        command = [
            str(self.python),
            str(WORKER),
            "--engine",
            self.backend,
            "--model",
            self.model_path,
            "--batch-size",
            str(self.batch_size),
        ]
        if self.max_model_len:
            command += ["--max-model-len", str(self.max_model_len)]
        return command

    def answers(self, requests: Iterable[GenRequest]) -> Iterator[Answer | Failure]:
        requests = list(requests)
        if not requests:
            return
        log = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        proc = subprocess.Popen(
            self._command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env=dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false", **self.env),
        )
        feeder = threading.Thread(target=_feed, args=(cast(IO[bytes], proc.stdin), requests), daemon=True)
        feeder.start()
        answered = 0
        try:
            for line in proc.stdout:  # type: ignore[union-attr]
                if not line.startswith(self.prefix):
                    continue
                message = orjson.loads(line[len(self.prefix) :])
                if message.get("ready"):
                    continue
                answered += 1
                if "failure" in message:
                    result: Answer | Failure = Failure(message["key"], message["failure"], message.get("detail", ""))
                else:
                    samples = [
                        Sample(s["text"], s["finish_reason"], s["prompt_tokens"], s["completion_tokens"])
                        for s in message["samples"]
                    ]
                    result = Answer(message["key"], samples)
                self.usage.record(result)
                yield result
            code = proc.wait()
            if code != 0 or answered != len(requests):
                raise BadInput(
                    f"score.model: the {self.backend} worker ({self.python}) exited with code {code} "
                    f"after {answered} of {len(requests)} answers: {_last_line(log)}"
                )
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            log.close()


def _feed(stdin: IO[bytes], requests: list[GenRequest]) -> None:
    try:
        for r in requests:
            stdin.write(
                orjson.dumps(
                    {
                        "key": r.key,
                        "messages": r.messages,
                        "temperature": r.temperature,
                        "max_tokens": r.max_tokens,
                        "n": r.n,
                        "seed": r.seed,
                    }
                )
                + b"\n"
            )
        stdin.close()
    except (BrokenPipeError, ValueError):  # the worker died (its exit code says why) or was stopped
        pass


def _last_line(log: IO[str]) -> str:
    """The last meaningful line the worker wrote to stderr (its error)."""
    log.seek(0)
    tail: deque[str] = deque(maxlen=200)
    for line in log:
        if line.strip():
            tail.append(line.strip())
    errors = [line for line in tail if "Error" in line or "error" in line]
    return (errors[-1] if errors else tail[-1] if tail else "no output")[:400]
