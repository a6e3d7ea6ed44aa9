"""The served engine's cost per step beyond the forward, for `pdreal profile`'s engine.json
(`prefill_step_overhead_s`, `decode_step_overhead_s`; pdsim adds them to every step,
pdsim/perf/overhead.py).

A short in-process run (a prefill and a decode engine over the local transfer backend, or one
colocated engine) with every step timed and its forward timed inside it: overhead = (step time -
forward time) per step with a forward. Each step's outputs are sent as the scheduler process
sends them (EventPublisher over an ipc:// pipe drained on the far end), so the figure covers
scheduling, sampling, transfer polls, bookkeeping and the IPC to the HTTP process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any


@dataclass
class _StepClock:
    forward_s: float = 0.0
    step_s: float = 0.0
    steps_with_forward: int = 0

    @property
    def overhead_s(self) -> float:
        return (self.step_s - self.forward_s) / max(1, self.steps_with_forward)


def _fixed(group: str) -> Callable[[str], str]:
    """The clock grouping that puts every forward of an engine in `group`."""
    return lambda kind: group


def _instrument(engine: Any, group: Callable[[str], str], publish: Callable[[list[Any]], None]
                ) -> dict[str, _StepClock]:
    """Time the engine's steps and forwards; a step with a forward counts in the clock
    `group(kind of that forward)`. Each step's outputs go through `publish` (the scheduler
    process's event send, pdreal.serving.scheduler.EventPublisher) inside the timed step, as served."""
    clocks: dict[str, _StepClock] = {}
    # every forward goes through forward_logits (ModelRunner.forward calls it too): timed once there
    forward, step, pending = engine.runner.forward_logits, engine.step, {"forward_s": 0.0, "forwards": 0}

    def timed_forward(chunks: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return forward(chunks, *args, **kwargs)
        finally:
            pending["forward_s"] += time.perf_counter() - start
            pending["forwards"] += 1

    def timed_step() -> Any:
        pending.update(forward_s=0.0, forwards=0)
        start = time.perf_counter()
        outputs = step()
        publish(outputs)
        if pending["forwards"]:
            clock = clocks.setdefault(group(engine.runner.steps[-1].kind), _StepClock())
            clock.step_s += time.perf_counter() - start
            clock.forward_s += pending["forward_s"]
            clock.steps_with_forward += 1
        return outputs

    engine.runner.forward_logits, engine.step = timed_forward, timed_step
    return clocks


def _overhead_requests(vocab: int, num_requests: int, prompt_tokens: int, output_tokens: int) -> list[Any]:
    from pdreal.engine.common import EngineRequest
    from pdreal.model.sampling import SamplingParams

    return [EngineRequest(i, tuple((13 * i + j) % vocab for j in range(prompt_tokens)),
                          SamplingParams(max_new_tokens=output_tokens, ignore_eos=True), bootstrap_room=i + 1)
            for i in range(num_requests)]


class EventSink:
    """The served event pipe for the step-overhead run: the same ipc:// PUSH/PULL pair and the
    scheduler's EventPublisher, with a thread draining the far end as the HTTP process would."""

    def __enter__(self) -> EventSink:
        import threading

        import zmq

        from pdreal.serving.ipc import IpcPaths

        self.paths, self.ctx = IpcPaths(), zmq.Context()
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.bind(self.paths.events)
        self.pushes: list[Any] = []
        self.received = 0
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()
        return self

    def _drain(self) -> None:
        import zmq

        try:
            while self.pull.recv() != b"":
                self.received += 1
        except zmq.ZMQError:  # the context is closing
            pass

    def publisher(self, engine: Any) -> Callable[[list[Any]], None]:
        import zmq

        from pdreal.serving.scheduler import EventPublisher

        push = self.ctx.socket(zmq.PUSH)
        push.connect(self.paths.events)
        self.pushes.append(push)
        return EventPublisher(engine, push).publish

    def __exit__(self, *exc: object) -> None:
        for push in self.pushes:
            push.send(b"")
            push.close(linger=1000)
        self._thread.join(timeout=5.0)
        self.pull.close(linger=0)
        self.ctx.term()
        self.paths.cleanup()


def step_overhead_facts(model: Any, config: Any, num_requests: int = 4, prompt_tokens: int = 64,
                        output_tokens: int = 16) -> dict[str, float]:
    """Seconds per engine step beyond the forward (scheduling, sampling, polling, bookkeeping)."""
    from pdreal.engine.common import ModelRunner
    from pdreal.engine.decode import DecodeEngine
    from pdreal.engine.driver import run_disaggregated
    from pdreal.engine.prefill import PrefillEngine
    from pdreal.transfer import LocalHub, TransferConfig, make_kv_manager

    hub, transfer = LocalHub(), TransferConfig(backend="local")
    with EventSink() as sink:
        cfg = replace(config, instance_id=0)
        runner = ModelRunner(model, cfg)
        prefill = PrefillEngine(runner, make_kv_manager(transfer, runner.pool, hub), cfg)
        clocks = [_instrument(prefill, _fixed("prefill"), sink.publisher(prefill))]
        cfg = replace(config, instance_id=1)
        runner = ModelRunner(model, cfg)
        decode = DecodeEngine(runner, make_kv_manager(transfer, runner.pool, hub), cfg)
        clocks.append(_instrument(decode, _fixed("decode"), sink.publisher(decode)))
        engines = (prefill, decode)
        reqs = _overhead_requests(model.spec.vocab_size, num_requests, prompt_tokens, output_tokens)
        try:
            run_disaggregated(prefill, decode, reqs)
        finally:
            for engine in engines:
                engine.kv.close()
    return {f"{role}_step_overhead_s": c.get(role, _StepClock()).overhead_s
            for role, c in zip(("prefill", "decode"), clocks, strict=True)}


def colocated_step_overhead_facts(model: Any, config: Any, num_requests: int = 6, prompt_tokens: int = 64,
                                  output_tokens: int = 16) -> dict[str, float]:
    """The same on a colocated engine (its schedule), requests arriving every other step:
    prefill = steps whose forward holds prefill chunks (alone or mixed with decodes), decode =
    decode-only steps (pdsim adds the larger of the two to a mixed step)."""
    from pdreal.engine.colocated import ColocatedEngine
    from pdreal.engine.common import ModelRunner
    from pdreal.engine.driver import run_colocated

    engine = ColocatedEngine(ModelRunner(model, config), config)
    with EventSink() as sink:
        clocks = _instrument(engine, lambda kind: "decode" if kind == "decode" else "prefill", sink.publisher(engine))
        run_colocated(engine, _overhead_requests(model.spec.vocab_size, num_requests, prompt_tokens, output_tokens),
                      add_every_steps=2)
    engine.check_invariants()
    return {f"{side}_step_overhead_s": clocks.get(side, _StepClock()).overhead_s for side in ("prefill", "decode")}
