"""Deterministic simulation of the whole system (see :mod:`pytimely.simulate.run`)."""
