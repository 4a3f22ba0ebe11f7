"""Measure the fault table of docs/cluster.md: ``python tests/cluster/measure_faults.py`` from the repository root.

Each fault is injected once between two real processes (the proxy of
:mod:`tests.cluster.proxy`, or a signal to process 1); prints one Markdown row
per fault: what was detected, how soon, the exit statuses, and whether an
output file was written.
"""

from __future__ import annotations

import re
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.cluster.helpers import Cluster
from tests.cluster.jobs import expected_sums
from tests.cluster.proxy import FIELDS, Fault
from tests.cluster.test_faults import SUM, read_sums, run_through


def detected(stderr: str) -> str:
    """The error process 0 stopped with, shortened."""
    match = re.search(r"process 0: (\w+): (.*)", stderr)
    if match is None:
        return "—"
    text = match.group(2)
    return f"`{match.group(1)}`: {text[:90]}{'…' if len(text) > 90 else ''}"


def output_state(out: Path, epochs: int = 4, rows: int = 3000) -> str:
    """Whether the output is absent, complete and right, or something else."""
    if not out.exists():
        return "none written"
    return "complete, correct" if read_sums(out) == expected_sums(epochs, rows) else "**wrong**"


def row(name: str, fault: Fault, **env: str) -> str:
    """One table row for a proxy fault."""
    with tempfile.TemporaryDirectory() as tmp:
        results, seconds, out = run_through(Path(tmp), fault, **env)
        state = output_state(out)
    codes = "/".join(str(r[0]) for r in results)
    failed = any(r[0] for r in results)
    when = f"{seconds:.2f} s" if failed else "—"
    return f"| {name} | {detected(results[0][2]) if failed else 'survived'} | {when} | {codes} | {state} |"


def signal_row(name: str, sig: signal.Signals, resume_after: float | None, **env: str) -> str:
    """One table row for a signal to process 1 in the middle of a run."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sums.csv"
        cluster = Cluster(2, PYTIMELY_HEARTBEAT="0.1", **env)
        try:
            cluster.start([*SUM, str(out), "60", "1000", "0.05"])
            stdout = cluster.procs[1].stdout
            assert stdout is not None and "started" in stdout.readline()
            time.sleep(0.5)
            hit = time.monotonic()
            cluster.procs[1].send_signal(sig)
            if resume_after is not None:
                resume = threading.Timer(resume_after, cluster.procs[1].send_signal, (signal.SIGCONT,))
                resume.start()
            cluster.procs[0].wait(120)
            ended = time.monotonic()
            if cluster.procs[1].poll() is None:
                cluster.procs[1].send_signal(signal.SIGCONT)
            results = cluster.wait(120)
        finally:
            cluster.kill()
        state = output_state(out, 60, 1000)
    codes = "/".join(str(r[0]) for r in results)
    failed = results[0][0] != 0
    when = f"{ended - hit:.2f} s" if failed else "—"
    return f"| {name} | {detected(results[0][2]) if failed else 'survived'} | {when} | {codes} | {state} |"


def main() -> None:
    """Print the table."""
    print("| fault | detected | time to detection | exit status (p0/p1) | output |")
    print("|---|---|---|---|---|")
    for field, offset in FIELDS.items():
        print(row(f"bit flip in header field `{field}`", Fault.flip(offset)))
    print(row("bit flip in the payload", Fault.flip(-1)))
    print(row("payload rewritten, digest recomputed", Fault.tamper()))
    print(row("truncated frame, then FIN", Fault.truncate()))
    print(row("duplicated frame", Fault.duplicate()))
    print(row("reordered frames", Fault.reorder()))
    print(row("dropped frame", Fault.drop()))
    print(row("FIN mid-run", Fault.fin()))
    print(row("RST mid-run", Fault.rst()))
    print(row("link held still 3 s (timeout 10 s)", Fault.delay(3.0), PYTIMELY_TIMEOUT="10"))
    print(row("link held still 15 s (timeout 10 s)", Fault.delay(15.0), PYTIMELY_TIMEOUT="10"))
    print(signal_row("`kill -9` of process 1", signal.SIGKILL, None, PYTIMELY_TIMEOUT="10"))
    print(signal_row("`SIGSTOP` of process 1 for 3 s (timeout 10 s)", signal.SIGSTOP, 3.0, PYTIMELY_TIMEOUT="10"))
    print(signal_row("`SIGSTOP` of process 1 for 15 s (timeout 10 s)", signal.SIGSTOP, 15.0, PYTIMELY_TIMEOUT="10"))


if __name__ == "__main__":
    main()
