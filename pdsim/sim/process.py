"""The simulator's processes: simpy Processes whose resume step is compiled.

A simpy `Process` resumes its generator in `Process._resume`, a Python method: each time an event
it waits on fires, an interpreted frame runs its loop, looks up a dozen attributes by name and
binds a new method object to register itself on the next event. The simulator's processes
resume ~6 times per request; compiled, the loop costs ~1,700 instructions less a resume.
`start` makes a simpy Process as `env.process` does, and gives it a `Resume` as its `_resume`: the
same loop, compiled, reading a Tick's fields natively. Everything else stays simpy's: the process
is a `simpy.Process` (an event others can wait on, with `target`, `is_alive`, `interrupt`), its
first step is simpy's own `Initialize`, and simpy's `Interruption` and `rearm` find the Resume
where they look for `_resume`, on the waited event's callbacks (its first, the Initialize's,
included).

The loop is simpy 4.1's `Process._resume`, step for step (tests/sim/test_process.py runs random
worlds of processes started both ways and compares them): send the event's value into the generator
(throw a copy of a failed event's exception), register on the event it yields next, and when the
generator ends, succeed or fail the process with its return value or exception. One difference,
invisible to the simulation: simpy cuts its own frame out of a failed process's traceback; the
compiled loop adds no frame to cut.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from pdsim.sim.events import Tick, Wait


class Resume:
    """`Process._resume` of one process, compiled (see the module's docstring): called with the
    event the process waited on, it runs the generator up to its next wait."""

    def __init__(self, process: simpy.Process) -> None:
        self.process = process
        self.env: Any = process.env
        self.generator: Any = process._generator

    def __call__(self, event: Any) -> None:
        env, process, generator = self.env, self.process, self.generator
        env._active_proc = process
        while True:
            try:
                if isinstance(event, Tick):  # (a Tick never fails)
                    tick: Tick = event
                    value = tick._value  # (send(None) is next(): the generator's own slot, no method lookup)
                    event = next(generator) if value is None else generator.send(value)
                elif event._ok:
                    event = generator.send(event._value)
                else:
                    event = generator.throw(_failure(event))
            except StopIteration as stop:
                event = None
                process._ok = True
                process._value = stop.args[0] if len(stop.args) else None
                env.schedule(process)
                break
            except BaseException as exc:  # noqa: BLE001 (simpy's: the process fails with it)
                event = None
                process._ok = False
                process._value = exc
                env.schedule(process)
                break
            if _wait_on(event, self):
                break
        process._target = event
        env._active_proc = None


def _failure(event: Any) -> BaseException:
    """The exception to throw into a process whose event failed: simpy's exclusive copy, caused
    by the event's own (the event is defused: its failure is handled)."""
    event._defused = True
    failure: Any = event._value
    exc: BaseException = type(failure)(*failure.args)
    exc.__cause__ = failure
    return exc


def _wait_on(event: Any, resume: Resume) -> bool:
    """Register `resume` on the event a process yielded; False when it has fired already (the
    loop goes on with its value). A yield that is no event is simpy's RuntimeError."""
    if isinstance(event, Tick):
        tick: Tick = event
        callbacks = tick.callbacks
    else:
        try:
            callbacks = event.callbacks
        except AttributeError:
            raise RuntimeError(f'Invalid yield value "{event}"') from None
    if callbacks is None:
        return False
    callbacks.append(resume)
    return True


def start(env: simpy.Environment, generator: Generator[Wait, Any, Any]) -> simpy.Process:
    """`env.process(generator)` for a generator that yields Ticks too, resumed by a `Resume`."""
    process = env.process(generator)  # type: ignore[arg-type]  # (simpy's annotation says Events)
    resume: Any = Resume(process)
    process._resume = resume  # type: ignore[method-assign]
    process._target.callbacks = [resume]  # (its Initialize's: simpy's resume, bound before)
    return process
