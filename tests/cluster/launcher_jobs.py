"""A process for ``pytimely launch --elastic`` that only talks to the control endpoint (no dataflow).

``python -m tests.cluster.launcher_jobs OUT``: process 0 asks the launcher to remove process 1 and, at once, for a
newcomer, and records what the launcher reports meanwhile; process 1 leaves (exits) a second after process 0 has
taken its first look (however slow the machine, that look sees it still leaving); the newcomer records the hosts it
was told to dial and those it was told have left.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

from pytimely.membership import request


def _control() -> dict[str, object]:
    """Where the launcher's control endpoint is, and the secret to sign with (the run contract's)."""
    from pytimely.config import RunConfig

    run = RunConfig.from_env()
    return {"address": run.control, "secret": run.cluster.secret}


def main(out: str) -> int:
    """Run as the process the launcher says this is."""
    me = int(os.environ["PYTIMELY_PROCESS"])
    if os.environ.get("PYTIMELY_JOIN") == "1":
        record = {"hosts": os.environ["PYTIMELY_HOSTS"], "left": os.environ["PYTIMELY_LEFT"]}
        with open(os.path.join(out, f"newcomer-{me}.json"), "w") as f:
            json.dump(record, f)
        return 0
    if me == 1:
        asked = threading.Event()
        signal.signal(signal.SIGUSR1, lambda *_: asked.set())
        open(os.path.join(out, "ready"), "w").close()  # SIGUSR1 no longer kills it
        if not asked.wait(60):
            return 3
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(out, "looked")):
            if time.monotonic() > deadline:
                return 5
            time.sleep(0.01)
        time.sleep(1.0)  # a leave that takes a while: the newcomer must not be started before it is over
        return 0
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(out, "ready")):
        if time.monotonic() > deadline:
            return 4
        time.sleep(0.01)
    request("remove", 1, **_control())
    newcomer = int(request("add", **_control())["process"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # Two requests, so not one instant: the newcomer is asked first. Both only move forward (leaving, then
        # exited; waiting, then running, then exited), so a newcomer seen started means the leaver had exited
        # before the second request too; asked the other way round, a leaver seen leaving and a newcomer started
        # just after it exited would look like a newcomer started too early.
        joiner = request("status", newcomer, **_control())
        leaver = request("status", 1, **_control())
        seen.append({"leaver": leaver["state"], "newcomer": joiner["state"]})
        if not os.path.exists(os.path.join(out, "looked")):
            open(os.path.join(out, "looked"), "w").close()  # the leaver may go now
        if joiner["state"] == "exited":
            break
        time.sleep(0.05)
    with open(os.path.join(out, "requester.json"), "w") as f:
        json.dump({"newcomer": newcomer, "seen": seen}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

