"""Strangers at the launcher's control endpoint: ``python -m tests.cluster.strangers REPORT COUNT``.

Holds ``COUNT`` silent connections to ``PYTIMELY_CONTROL`` and opens a new one at once for each the endpoint
closes, until the endpoint is gone (a connection is refused) or two minutes have passed. Creates ``REPORT.ready``
once ``COUNT`` are open, and writes ``REPORT`` (JSON: connections opened, the most held at once, and why it
stopped: ``"endpoint gone"`` or ``"time"``) when it stops.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import sys
import time


def main(report: str, count: int) -> int:
    """Hold the connections; write the report."""
    host, _, port = os.environ["PYTIMELY_CONTROL"].rpartition(":")
    held: set[socket.socket] = set()
    selector = selectors.DefaultSelector()
    opened, peak, ready, why = 0, 0, False, "time"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            while len(held) < count:
                try:
                    sock = socket.create_connection((host, int(port)), timeout=2)
                except OSError:
                    why = "endpoint gone"  # the run is over
                    return 0
                opened += 1
                held.add(sock)
                selector.register(sock, selectors.EVENT_READ)
            peak = max(peak, len(held))
            if not ready:
                ready = True
                with open(report + ".ready", "w"):
                    pass
            for key, _ in selector.select(timeout=0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    closed = sock.recv(1) == b""
                except OSError:
                    closed = True
                if closed:
                    selector.unregister(sock)
                    sock.close()
                    held.discard(sock)
        return 0
    finally:
        with open(report, "w") as f:
            json.dump({"opened": opened, "peak": peak, "stopped": why}, f)
        for sock in held:
            sock.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
