"""The exchange with progress aggregated per process: no violation, and its mutant is caught by Safe."""

from __future__ import annotations

import pytest

from pytimely.verify.aggregate import AggregateConfig, AggState, agg_send, send_upd
from pytimely.verify.checker import check
from pytimely.verify.configs import aggregate_config, exchange_config, make_model
from pytimely.verify.mutants import Mutant


@pytest.mark.parametrize(("config", "depth"), [("pair", 5), ("shared", 4)])
def test_aggregated_exchange_keeps_every_invariant(config: str, depth: int) -> None:
    r = check(make_model("aggregate", config), depth)
    assert r.violation is None, [str(s.action) for s in r.trace]
    assert r.states > 10_000


def test_reordering_an_outbox_breaks_safe_in_five_steps() -> None:
    r = check(make_model("aggregate", "pair", mutant=Mutant.AGGREGATE_REORDERS), 5)
    assert r.violation == "Safe"
    names = [s.action.name for s in r.trace[1:] if s.action is not None]
    assert names == ["perf_op", "send_upd", "send_upd", "agg_send", "recv_upd"]


def test_a_send_reaches_its_own_process_at_once_and_others_through_the_outbox() -> None:
    cfg = aggregate_config("shared")
    (s,) = [s for s in make_model("aggregate", "shared").initial_states() if s.base.caps[0]][:1]
    point = next(iter(s.base.caps[0]))
    c = s.base._replace(temp=(s.base.temp[0].add(point, -1), *s.base.temp[1:]))
    s2 = send_upd(cfg, AggState(c, s.out), 0, frozenset({point}))
    assert [len(q) for q in s2.base.msg[0]] == [1, 1, 0] and len(s2.out[0]) == 1
    s3 = agg_send(cfg, s2, 0, 1)
    assert s3.out[0] == () and [len(q) for q in s3.base.msg[0]] == [1, 1, 1]


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="every worker"):
        AggregateConfig(exchange_config("chain3+1", workers=2), (0, 0, 1))
    with pytest.raises(ValueError, match="contiguously"):
        AggregateConfig(exchange_config("chain3+1", workers=3), (0, 1, 0))
    with pytest.raises(ValueError, match="does not apply"):
        AggregateConfig(exchange_config("chain3+1", workers=2), (0, 1), mutant=Mutant.MINT_EQUAL)
    with pytest.raises(ValueError, match="unknown aggregate"):
        aggregate_config("triple")
