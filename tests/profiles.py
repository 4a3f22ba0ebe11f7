"""Hypothesis profiles, chosen by one setting: ``HYPOTHESIS_PROFILE`` = ``ci`` (the default), ``dev`` or ``thorough``.

Each property test states its number of examples for the ``ci`` profile with :func:`examples`; ``dev`` runs a
fifth of them (at least 2) for a quick loop while editing, ``thorough`` ten times as many for a long run before a
release. The profiles also set what Hypothesis itself decides: deadlines are off (a loaded machine is not a bug),
and ``thorough`` prints statistics.

    HYPOTHESIS_PROFILE=thorough make test
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_FACTORS = {"ci": 1.0, "dev": 0.2, "thorough": 10.0}

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in _FACTORS:
    raise SystemExit(f"HYPOTHESIS_PROFILE must be one of {sorted(_FACTORS)}, got {PROFILE!r}")

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "thorough", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile(PROFILE)


def examples(ci: int) -> int:
    """The number of examples a test runs under the chosen profile, given its number under ``ci``."""
    return max(2, round(ci * _FACTORS[PROFILE]))
