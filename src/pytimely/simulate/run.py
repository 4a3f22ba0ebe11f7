"""One seed's simulation: the real runtime on simulated processes, a launcher, faults, and the oracles.

:func:`simulate` builds, from a seed, a workload (:mod:`~pytimely.simulate.workloads`), a
:class:`~pytimely.simulate.kernel.Kernel`, a :class:`~pytimely.simulate.network.SimNetwork` and the faults
to inject, then plays the launcher: it starts every process of the computation with
:func:`pytimely.execute.run_process` on a simulated :class:`~pytimely.communication.platform.Platform` (the
real cluster layer, workers, progress tracking and operators; real frames, handshakes and keys), starts
newcomers when an elastic plan says, and stops every process once one fails, as ``pytimely launch`` does.
A run that failed is started again: from the recovery store when the workload has one, from the start
otherwise. Faults are drawn only for the first :data:`FAULT_WINDOW` simulated seconds; once they stop, the
computation must complete (liveness) with the reference output.

What a run may never do, whatever the faults (each a :class:`~pytimely.simulate.oracles.Violation`):

* ``Safe``, ``FrontierMonotone``: see :mod:`~pytimely.simulate.oracles`, checked at every watched step;
* ``Output``: a completed run's output differs from the reference (a record lost, duplicated, or made up;
  across crashes, an epoch's output twice or never: exactly once);
* ``Liveness``: the computation did not complete within :data:`LIVENESS` simulated seconds after the last
  fault, or every thread waits with nothing left to wake it;
* ``UnexplainedFailure``: a run failed though no fault that may fail a run had happened;
* ``UntypedError``: a failure that is not a :class:`~pytimely.errors.PytimelyError`;
* ``ThreadDied``: a thread of the runtime died of an exception nobody caught;
* ``Memory``: a process held more than its flow-control windows allow.
"""

from __future__ import annotations

import functools
import random
import re
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytimely.communication.platform import Platform
from pytimely.config import Config
from pytimely.errors import InvalidArgument, NotSimulableError, PytimelyError
from pytimely.simulate.kernel import Kernel, Killed, SimProcess
from pytimely.simulate.network import Delays, SimNetwork
from pytimely.simulate.oracles import Observer, Violation, compare, memory_bound
from pytimely.simulate.store import SimStore
from pytimely.simulate.threads import SimClock, SimThreads
from pytimely.simulate.workloads import WORKLOADS, Workload

__all__ = ["DISRUPTIVE", "FAULTS", "FAULT_WINDOW", "LIVENESS", "Outcome", "simulate"]

FAULTS = (
    "delay", "slow", "pause", "partition", "loss", "duplicate", "damage", "kill", "join", "leave", "store", "buggify",
)
"""Every kind of fault a seed may draw."""

DISRUPTIVE = frozenset({"pause", "partition", "loss", "duplicate", "damage", "kill", "store"})
"""Faults after which a run may fail (with a typed error); the others must never fail one."""

FAULT_WINDOW = 0.3
"""Simulated seconds from the start during which faults are drawn."""

LIVENESS = 240.0
"""Simulated seconds the computation has, after the last fault, to complete."""

MAX_ATTEMPTS = 8
MAX_SWITCHES = 3_000_000
SECRET = b"a simulated cluster's secret"
PORT = 20000
_TOKENS = re.compile(r"\b[0-9a-f]{8,}\b")


@dataclass
class Outcome:
    """What one seed's simulation found."""

    seed: int
    workload: str
    violations: list[Violation]
    trace: list[str]
    faults: Counter[str]
    """How often each kind of fault befell the run."""
    attempts: int
    completed: bool
    sim_seconds: float
    switches: int
    takes: int
    """Batches checked against every worker's frontier (Safe)."""

    @property
    def ok(self) -> bool:
        """Whether no property was violated."""
        return not self.violations


@dataclass(eq=False)
class _Process:
    """A process the launcher started: its simulated process, and how it ended."""

    index: int
    sim: SimProcess
    config: Config
    ended: bool = False
    killed: bool = False
    error: BaseException | None = None
    results: list[Any] | None = None
    stats: list[dict[str, Any]] = field(default_factory=list)


class Simulation:
    """One seed's run (see the module doc)."""

    def __init__(self, seed: int, faults: frozenset[str], workload: str | None = None) -> None:
        self.seed = seed
        self.enabled = faults
        root = random.Random(seed)
        self.kernel = Kernel(random.Random(root.getrandbits(64)))
        self.fault_rng = random.Random(root.getrandbits(64))
        net_rng = random.Random(root.getrandbits(64))
        work_rng = random.Random(root.getrandbits(64))
        kernel = self.kernel
        self.observer = Observer(lambda: kernel.now)
        name = workload if workload is not None else self._pick(root)
        self.workload: Workload = WORKLOADS[name](work_rng, self.observer, faults)
        wide = Delays(base=(50e-6, 5e-3), jitter=2e-3) if "delay" in faults else Delays()
        self.network = SimNetwork(kernel, net_rng, wide)
        self.store = SimStore(kernel) if self.workload.recovery else None
        self.trace: list[str] = []
        self.violations: list[Violation] = []
        self.counts: Counter[str] = Counter()
        self.attempt = 0
        self.processes: dict[int, _Process] = {}
        self.slowness: dict[int, float] = {}
        self.disrupted = False
        """Whether a fault that may fail a run befell the current attempt."""
        self.failed_at: float | None = None
        self.launching = False
        self._exits: list[Any] = []
        """The launcher's thread, while it waits for a process to end."""
        self.last_fault = 0.0
        if "delay" in faults:
            self.counts["delay"] += 1

    def _pick(self, root: random.Random) -> str:
        choices = ["random", "random", "random", "recovered"]
        if "kill" in self.enabled or "store" in self.enabled:
            choices += ["recovered", "recovered"]
        if "join" in self.enabled or "leave" in self.enabled:
            choices += ["rescaled", "rescaled"]
        if "join" in self.enabled:
            choices += ["joins"]
        return root.choice(choices)

    def note(self, text: str) -> None:
        """Add a line to the trace."""
        self.trace.append(f"{self.kernel.now:10.6f} {_TOKENS.sub('…', text)}")

    # -- faults ---------------------------------------------------------------------------------------------------

    def _schedule_faults(self) -> None:
        rng, kernel, enabled = self.fault_rng, self.kernel, self.enabled
        workload = self.workload
        if "slow" in enabled and rng.random() < 0.5:
            index = rng.randrange(workload.processes)
            self.slowness[index] = rng.choice((5.0, 20.0, 100.0))
        if "buggify" in enabled and rng.random() < 0.5:
            buggify_rng = random.Random(rng.getrandbits(64))

            def buggify(task: Any, site: str) -> float:
                if kernel.now > FAULT_WINDOW or buggify_rng.random() >= 0.02:
                    return 0.0
                self.counts["buggify"] += 1
                return buggify_rng.uniform(0.0, 0.02)

            kernel.buggify = buggify
        kinds = [k for k in ("pause", "partition", "loss", "duplicate", "damage", "kill", "store") if k in enabled]
        if not workload.recovery:
            kinds = [k for k in kinds if k != "store"]
        for kind in kinds:
            for _ in range(rng.choice((0, 0, 1, 1, 2))):
                at = rng.uniform(0.0, FAULT_WINDOW)
                kernel.at(at, functools.partial(self._fault, kind))

    def _live(self) -> list[_Process]:
        return [p for p in self.processes.values() if not p.ended and not p.killed]

    def _fault(self, kind: str, tries: int = 0) -> None:
        rng, kernel = self.fault_rng, self.kernel
        live = self._live()
        if not live or self.failed_at is not None:
            return
        if kind in ("pause", "partition", "store"):
            long = rng.random() < 0.15
            # Short ones are within every timeout; long ones outlast the heartbeat timeout (10 s).
            duration = rng.uniform(10.5, 14.0) if long else rng.uniform(0.001, 0.3)
            if kind == "pause":
                victim = rng.choice(live)
                victim.sim.paused_until = kernel.now + duration
                self.note(f"fault: pause p{victim.index} for {duration:.3f} s")
            elif kind == "partition":
                if len(live) < 2:
                    return
                a, b = rng.sample(live, 2)
                self.network.partition(a.index, b.index, kernel.now + duration)
                self.note(f"fault: partition p{a.index}|p{b.index} for {duration:.3f} s")
            else:
                assert self.store is not None
                self.store.failing_until = kernel.now + duration
                self.note(f"fault: the store fails writes for {duration:.3f} s")
            self.counts[kind] += 1
            self._disrupt(kernel.now + duration)
            return
        if kind in ("loss", "duplicate", "damage"):
            if len(live) < 2:
                return
            a, b = rng.sample(live, 2)
            if self.network.arm(a.index, b.index, kind):
                self.counts[kind] += 1
                self.note(f"fault: {kind} armed on p{a.index}->p{b.index}")
                self._disrupt(kernel.now + 1.0)
            elif tries < 20:
                kernel.at(kernel.now + 0.01, lambda: self._fault(kind, tries + 1))
            return
        if kind == "kill":
            victim = rng.choice(live)
            self.note(f"fault: kill p{victim.index}")
            self.counts["kill"] += 1
            self._disrupt(kernel.now)
            self._kill(victim)
            return
        raise InvalidArgument(f"unknown fault {kind!r}")

    def _disrupt(self, until: float) -> None:
        self.disrupted = True
        self.last_fault = max(self.last_fault, until)

    # -- the launcher ---------------------------------------------------------------------------------------------

    def _config(self, index: int, *, join: bool = False, left: tuple[int, ...] = ()) -> Config:
        workload = self.workload
        processes = index + 1 if join else workload.processes
        return Config(
            workers=workload.workers,
            processes=processes,
            process=index,
            hosts=tuple(("127.0.0.1", PORT + i) for i in range(processes)),
            secret=SECRET,
            shared_memory=0,
            elastic=workload.elastic,
            initial=workload.processes if workload.elastic else 0,
            join=join,
            left=left,
        )

    def _start(self, index: int, *, join: bool = False, left: tuple[int, ...] = ()) -> None:
        """Start process ``index`` of the current attempt (a newcomer with ``join``)."""
        from pytimely.execute import run_process
        from pytimely.recovery import Recovery

        kernel, workload = self.kernel, self.workload
        sim = SimProcess(f"p{index}", slowness=self.slowness.get(index, 1.0))
        if sim.slowness > 1:
            self.counts["slow"] += 1
        config = self._config(index, join=join, left=left)
        process = self.processes[index] = _Process(index, sim, config)
        threads = SimThreads(kernel, sim)
        platform = Platform(SimClock(kernel), threads, self.network.transport(sim, index))
        recovery = None
        if self.store is not None:
            recovery = Recovery(self.store, job=f"sim-{workload.name}", parameters={"seed": self.seed})
        attempt = self.attempt

        def job(worker: Any) -> Any:
            result = workload.job(worker)
            process.stats.append(worker.communication_stats())
            return result

        def main() -> None:
            try:
                results = run_process(job, config, platform=platform, recovery=recovery)
            except Killed:
                raise
            except BaseException as exc:
                self._ended(attempt, process, None, exc)
            else:
                self._ended(attempt, process, results, None)

        self.note(f"start p{index}" + (" (joins)" if join else ""))
        if join:
            self.counts["join"] += 1
        kernel.spawn(sim, "main", main)

    def _ended(self, attempt: int, process: _Process, results: list[Any] | None, error: BaseException | None) -> None:
        if attempt != self.attempt:
            return
        process.ended = True
        process.results = results
        process.error = error
        self.kernel.notify(self._exits)
        if error is None:
            plan = self.workload.plan
            leaves = plan is not None and process.index not in plan.processes_at(1 << 30)
            self.note(f"p{process.index} {'left' if leaves else 'exited'}")
            if leaves:
                self.counts["leave"] += 1
            for stats in process.stats:
                problem = memory_bound(process.index, stats, process.config)
                if problem is not None:
                    self._violate("Memory", problem)
            return
        self.note(f"p{process.index} failed: {type(error).__name__}: {str(error).splitlines()[0][:160]}")
        if isinstance(error, NotSimulableError):
            raise error
        if self.failed_at is None:
            self.failed_at = self.kernel.now
            # As pytimely launch does: the others are stopped once one fails (after a moment to fail on their own).
            self.kernel.at(self.kernel.now + 3.0, lambda: self._stop(attempt))

    def _stop(self, attempt: int) -> None:
        if attempt != self.attempt:
            return
        for process in self._live():
            self.note(f"launcher stops p{process.index}")
            self._kill(process)

    def _kill(self, process: _Process) -> None:
        self.kernel.notify(self._exits)
        process.killed = True
        self.kernel.kill(process.sim)
        self.network.kill(process.index)

    def _violate(self, prop: str, detail: str) -> None:
        self.violations.append(Violation(prop, _TOKENS.sub("…", detail), self.kernel.now))

    def _newcomers(self, attempt: int) -> None:
        """Start each process the elastic plan adds, once those leaving before it are gone (a launcher thread)."""
        workload = self.workload
        plan, kernel = workload.plan, self.kernel
        assert plan is not None
        for index in range(workload.processes, plan.processes):
            joins = plan.joins_at(index * workload.workers)
            gone = tuple(q for q in range(index) if q not in plan.processes_at(joins))
            while not all(q in self.processes and self.processes[q].ended for q in gone):
                if attempt != self.attempt or self.failed_at is not None:
                    return
                kernel.wait_on(self._exits, None)
            kernel.sleep(workload.delays.get(index, 0.0))
            if attempt != self.attempt or self.failed_at is not None:
                return
            self._start(index, join=True, left=gone)
        self.launching = False

    def _attempt_over(self) -> bool:
        if self.launching and self.failed_at is None:
            return False
        return all(p.ended or p.killed for p in self.processes.values())

    # -- running ----------------------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        """Run the computation, starting it again after failures, checking every property on the way."""
        kernel, workload = self.kernel, self.workload
        self.note(f"seed {self.seed}: {workload.describe()}; faults {','.join(sorted(self.enabled)) or 'none'}")
        self._schedule_faults()
        completed = False
        try:
            while self.attempt < MAX_ATTEMPTS and not self.violations:
                completed = self._attempt()
                if completed or self.violations:
                    break
                # Whoever starts it again does so a moment later, and later after each failure.
                backoff = min(16.0, 0.25 * 2 ** (self.attempt - 1))
                kernel.advance(kernel.now + backoff)
            if not completed and not self.violations:
                self._violate("Liveness", f"the computation did not complete in {MAX_ATTEMPTS} runs")
        except NotSimulableError as exc:
            self._violate("NotSimulable", str(exc))
        finally:
            strangers = kernel.strangers()
            kernel.shutdown()
        if strangers and not any(v.property == "NotSimulable" for v in self.violations):
            self._violate("NotSimulable", f"threads the simulator did not start ran: {', '.join(strangers)}")
        for task, died, text in kernel.errors:
            if not isinstance(died, Killed):
                self._violate("ThreadDied", f"thread {task.process.name}:{task.name} died of {text.strip()[-600:]}")
                break
        violations = self.observer.violations + self.violations
        for v in violations:
            self.trace.append(f"{v.at:10.6f} VIOLATION {v}")
        counts = self.counts + Counter(
            {k: v for k, v in self.network.counts.items() if k in ("loss", "duplicate", "damage")}
        )
        # Armed faults are counted once, when they befall a frame.
        for kind in ("loss", "duplicate", "damage"):
            counts[kind] = self.network.counts.get(kind, 0)
        return Outcome(
            self.seed, workload.name, violations, self.trace, counts, self.attempt, completed, kernel.now,
            kernel.switches, self.observer.takes,
        )

    def _attempt(self) -> bool:
        kernel, workload = self.kernel, self.workload
        self.attempt += 1
        self.observer.attempt = self.attempt
        self.processes = {}
        self.failed_at = None
        self.disrupted = self.kernel.now < self.last_fault
        self.note(f"attempt {self.attempt}")
        for index in range(workload.processes):
            self._start(index)
        if workload.plan is not None and workload.plan.processes > workload.processes:
            self.launching = True
            launcher = SimProcess("launcher")
            kernel.spawn(launcher, "newcomers", self._newcomers, self.attempt)
        limit = max(self.last_fault, FAULT_WINDOW) + LIVENESS
        finished = kernel.run(self._attempt_over, until=limit, max_switches=MAX_SWITCHES)
        if self.observer.violations:
            return False
        if not finished:
            waiting = [f"{t.process.name}:{t.name}" for t in kernel.tasks if not t.finished and not t.process.killed]
            self._violate(
                "Liveness",
                f"attempt {self.attempt} did not complete by {limit:.1f} s of simulated time ({LIVENESS:g} s after "
                f"the last fault); still waiting: {', '.join(waiting[:12]) or 'nothing'}",
            )
            return False
        failures = [p for p in self.processes.values() if p.error is not None]
        for process in failures:
            error = process.error
            assert error is not None
            if not isinstance(error, PytimelyError):
                where = traceback.extract_tb(error.__traceback__)[-4:]
                frames = " < ".join(f"{f.name} ({f.filename.rsplit('/', 1)[-1]}:{f.lineno})" for f in reversed(where))
                self._violate(
                    "UntypedError", f"p{process.index} failed with {type(error).__name__}: {error}, in {frames}"
                )
        if self.violations:
            return False
        if failures or any(p.killed for p in self.processes.values()):
            if not self.disrupted and not self.kernel.now < self.last_fault:
                first = failures[0].error if failures else None
                self._violate(
                    "UnexplainedFailure",
                    f"attempt {self.attempt} failed with no fault to explain it: "
                    f"{type(first).__name__}: {first}" if first is not None else "a process was stopped",
                )
            self.note(f"attempt {self.attempt} failed")
            return False
        results = {p.index: p.results or [] for p in self.processes.values()}
        problem = compare(workload.output(results), workload.reference(), complete=True)
        if problem is not None:
            self._violate("Output", problem)
            return False
        self.note(f"attempt {self.attempt} completed; output equals the reference")
        return True


def simulate(
    seed: int,
    faults: frozenset[str] = frozenset(FAULTS),
    *,
    workload: str | None = None,
    patch: Callable[[], Any] | None = None,
) -> Outcome:
    """Simulate one seed (see the module doc)."""
    return Simulation(seed, faults, workload).run()
