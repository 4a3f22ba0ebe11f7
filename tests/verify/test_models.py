"""The four models: their actions follow the figures of seed ``000_306a8e6bd5c43d47.txt`` and
exhaustive exploration at modest depth finds no violation of any invariant."""

from __future__ import annotations

from typing import Any

import pytest

from pytimely.order import Product
from pytimely.verify import clocks as C
from pytimely.verify import combined as K
from pytimely.verify import exchange as E
from pytimely.verify import propagation as P
from pytimely.verify.checker import check
from pytimely.verify.configs import (
    chain3_plus,
    clocks_config,
    combined_config,
    exchange_config,
    make_model,
    propagation_config,
)
from pytimely.verify.model import Action
from pytimely.verify.zmset import ZMSet


@pytest.mark.parametrize(
    ("model", "config", "depth"),
    [
        ("clocks", "chain3+1", 6),
        ("clocks", "diamond", 5),
        ("exchange", "chain3+1", 4),
        ("exchange", "diamond", 4),
        ("propagation", "wcc", 7),
        ("propagation", "nested", 5),
        ("propagation", "chain", 6),
        ("combined", "chain", 4),
        ("combined", "wcc", 3),
        ("combined", "nested", 3),
        ("combined", "pair", 8),
    ],
)
def test_no_violation(model: str, config: str, depth: int) -> None:
    m = make_model(model, config)
    r = check(m, depth)
    assert r.violation is None, [str(s.action) for s in r.trace]
    assert r.states > 0 and r.transitions > 0


def test_single_worker_and_three_workers() -> None:
    assert check(make_model("exchange", "chain2", workers=1), 6).ok
    assert check(make_model("exchange", "chain2", workers=3), 3).ok
    assert check(make_model("combined", "pair", workers=3), 5).ok
    assert check(make_model("clocks", "chain2", workers=3), 5).ok


def test_initial_states_satisfy_init() -> None:
    cc = clocks_config()
    assert all(C.Init(cc, s) for s in C.initial_states(cc))
    ec = exchange_config()
    assert all(E.Init(ec, s) for s in E.initial_states(ec))
    pc = propagation_config("nested")
    assert all(P.Init(pc, s) for s in P.initial_states(pc))
    kc = combined_config("wcc")
    assert all(K.Init(kc, s) for s in K.initial_states(kc))


def test_successors_are_enabled_and_never_stutter() -> None:
    for name in ("clocks", "exchange", "propagation", "combined"):
        m = make_model(name)
        for s in list(m.initial_states())[:5]:
            for act, s2 in m.successors(s):
                assert isinstance(act, Action)
                assert s2 != s


# --- clocks (Fig. 3) ----------------------------------------------------------------------------------------


def test_clocks_perf_op_requires_upright_and_present() -> None:
    cfg = clocks_config()
    c = next(s for s in C.initial_states(cfg) if s.rec == ZMSet({"p0": 1}))
    assert C.perf_op_enabled(cfg, c, 0, ZMSet.of("p0"), ZMSet.of("p1"))
    assert not C.perf_op_enabled(cfg, c, 0, ZMSet(), ZMSet.of("p1"))  # not upright
    assert not C.perf_op_enabled(cfg, c, 0, ZMSet.of("p1"), ZMSet.of("p2"))  # p1 not in rec
    c2 = C.perf_op(cfg, c, 1, ZMSet.of("p0"), ZMSet.of("p1"))
    assert c2.rec == ZMSet({"p1": 1}) and c2.temp[1] == ZMSet({"p0": -1, "p1": 1})
    # sending only the negative half would leave an un-upright remainder
    assert not C.send_upd_enabled(cfg, c2, 1, frozenset({"p0"}))
    assert C.send_upd_enabled(cfg, c2, 1, frozenset({"p1"}))
    c3 = C.send_upd(cfg, c2, 1, frozenset({"p0", "p1"}))
    assert all(q == (ZMSet({"p0": -1, "p1": 1}),) for q in c3.msg[1]) and not c3.temp[1]
    c4 = C.recv_upd(cfg, c3, 1, 0)
    assert c4.glob[0] == ZMSet({"p1": 1}) and c4.msg[1][0] == ()
    assert "p0" in c4.vacated and C.Safe(cfg, c4)


# --- exchange (Fig. 4) --------------------------------------------------------------------------------------


def _exchange_state(cfg: E.ExchangeConfig, caps: list[dict[str, int]]) -> E.State:
    n = cfg.workers
    c = E.State(
        tuple(ZMSet(m) for m in caps),
        ZMSet(),
        tuple(tuple(() for _ in range(n)) for _ in range(n)),
        (ZMSet(),) * n,
        (),
        frozenset(),
    )
    r = E.rec(c)
    return c._replace(glob=(r,) * n, vacated=E._vacant_points(cfg, (r,) * n))


def test_exchange_perf_op_conditions() -> None:
    cfg = exchange_config()
    c = _exchange_state(cfg, [{"p1": 1}, {}])
    assert E.Init(cfg, c)
    d0: ZMSet[Any] = ZMSet()
    # Δdata needs a strictly smaller capability; Δself one at or below
    assert E.perf_op_enabled(cfg, c, 0, d0, ZMSet.of((1, "p2")), d0)
    assert not E.perf_op_enabled(cfg, c, 0, d0, ZMSet.of((1, "p1")), d0)
    assert E.perf_op_enabled(cfg, c, 0, d0, d0, ZMSet.of("p1"))
    assert not E.perf_op_enabled(cfg, c, 0, d0, d0, ZMSet.of("p0"))
    assert not E.perf_op_enabled(cfg, c, 0, d0, d0, ZMSet.of("q"))
    assert not E.perf_op_enabled(cfg, c, 1, d0, d0, ZMSet.of("p1"))  # worker 1 holds nothing
    assert not E.perf_op_enabled(cfg, c, 0, ZMSet.of("p0"), d0, d0)  # cannot drop what it lacks
    assert not E.perf_op_enabled(cfg, c, 0, ZMSet.of("p1"), d0, ZMSet.of("p1"))  # no change at all
    c2 = E.perf_op(cfg, c, 0, ZMSet.of("p1"), ZMSet.of((1, "p2")), ZMSet.of("p2"))
    assert c2.caps[0] == ZMSet({"p2": 1}) and c2.data == ZMSet({(1, "p2"): 1})
    assert c2.temp[0] == ZMSet({"p1": -1, "p2": 2})
    assert E.rec(c2) == ZMSet({"p2": 2})
    # the remainder must stay justified: sending the -p1 alone would leave +2·p2 unjustified
    assert not E.send_upd_enabled(cfg, c2, 0, frozenset({"p1"}))
    assert E.send_upd_enabled(cfg, c2, 0, frozenset({"p2"}))
    c3 = E.recv_cap(cfg, c2, 1, "p2")
    assert c3.caps[1] == ZMSet({"p2": 1}) and not c3.data
    assert E.Safe(cfg, c3) and E.glob_lemma(cfg, c3) and E.temp_justified(cfg, c3)


def test_exchange_glob_lemma_detects_a_stray_update() -> None:
    cfg = exchange_config()
    c = _exchange_state(cfg, [{}, {}])
    bad = c._replace(msg=((((ZMSet({"p1": -1}),), ()), ((), ()))))
    assert not E.glob_lemma(cfg, bad)


# --- propagation (Fig. 6) -----------------------------------------------------------------------------------


def test_propagation_actions_on_wcc() -> None:
    cfg = propagation_config("wcc")
    z, one = Product(0, 0), Product(0, 1)
    c = P.make_state(cfg, {"b.3": {z: 1}})
    # before any propagation the implications are empty: no change_multiplicity is enabled
    assert not P.change_multiplicity_enabled(cfg, c, "b.3", z, 1)
    assert P.propagate_enabled(cfg, c, "b.3", z)
    assert not P.work_vacant(cfg, c, one)
    c = P.propagate(cfg, c, "b.3", z)
    i = cfg.index
    assert c.imp[i["b.3"]] == ZMSet({z: 1}) and c.work[i["c.1"]] == ZMSet({z: 1})
    c = P.propagate(cfg, c, "c.1", z)
    assert c.work[i["c.2"]] == ZMSet({one: 1})
    assert P.Safe(cfg, c) and P.imp_work_sum(cfg, c) and P.implied_frontier_lemma(cfg, c)
    final = P.propagate_all(cfg, c)
    assert final is not None and all(not w for w in final.work)
    assert P._frontier(final.imp[i["b.1"]]) == {one}
    # now the system may move the pointstamp forward: (b.3, (0, 0)) -> (b.3, (0, 1))
    assert P.change_multiplicity_enabled(cfg, final, "b.3", one, 1)
    c2 = P.change_multiplicity(cfg, final, "b.3", one, 1)
    c2 = P.change_multiplicity(cfg, c2, "b.3", z, -1)
    assert c2.work[i["b.3"]] == ZMSet({z: -1, one: 1})
    assert P.Safe(cfg, c2) and P.imp_work_sum(cfg, c2) and P.implied_frontier_lemma(cfg, c2)
    done = P.propagate_all(cfg, c2)
    assert done is not None and P._frontier(done.imp[i["c.1"]]) == {one}
    assert P._frontier(done.imp[i["b.1"]]) == frozenset()  # iteration 1 is the last one


def test_propagate_requires_a_minimal_entry() -> None:
    cfg = propagation_config("chain")
    c = P.make_state(cfg, {"a": {0: 1}, "b": {1: 1}})
    assert P.propagate_enabled(cfg, c, "a", 0)
    assert not P.propagate_enabled(cfg, c, "b", 1)  # 0 < 1 is still in a worklist


def test_propagate_all_outcomes_agree_on_frontiers() -> None:
    cfg = propagation_config("nested")
    z = Product(Product(0, 0), 0)
    c = P.make_state(cfg, {"in": {z: 1}, "x.out": {z: 1}})
    outs = P.propagate_all_outcomes(cfg, c)
    assert outs
    fronts = {tuple(P._frontier(o.imp[i]) for i in range(len(cfg.locations))) for o in outs}
    assert len(fronts) == 1


# --- combined (Fig. 7) --------------------------------------------------------------------------------------


def test_combined_recv_upd_needs_init_and_applies_cm_all() -> None:
    cfg = combined_config("pair")
    c = next(s for s in K.initial_states(cfg) if s.exch.caps[0] == ZMSet[Any]({("a", 0): 1}))
    assert K.Init(cfg, c)
    # worker 0 drops its capability and sends the change
    e = E.perf_op(cfg.exchange, c.exch, 0, ZMSet.of(("a", 0)), ZMSet(), ZMSet())
    e = E.send_upd(cfg.exchange, e, 0, frozenset({("a", 0)}))
    c = c._replace(exch=e)
    assert not K.recv_upd_enabled(cfg, c, 0, 1)  # worker 1 has not propagated yet
    c1 = K.propagate(cfg, c, 1)
    assert c1 is not None and c1.init[1]
    c = c1
    assert K.recv_upd_enabled(cfg, c, 0, 1)
    assert K.cm_conditions(cfg, c.prop[1], c.exch.msg[0][1][0])
    c = K.recv_upd(cfg, c, 0, 1)
    assert K.glob_pts_eq(cfg, c) and K.Safe(cfg, c)
    c2 = K.propagate(cfg, c, 1)
    assert c2 is not None and all(not m for m in c2.prop[1].imp)


def test_checked_cm_precondition() -> None:
    """A batch whose changes the receiver's implications do not witness is reported, not assumed."""
    cfg = combined_config("pair")
    m = make_model("combined", "pair")
    c = next(s for s in K.initial_states(cfg) if not any(s.exch.caps))
    c0 = K.propagate(cfg, c, 0)
    assert c0 is not None
    c = c0
    forged = c.exch._replace(msg=(((ZMSet[Any]({("b", 0): 1}),), ()), ((), ())))
    bad = c._replace(exch=forged)
    inv = {i.name: i for i in m.invariants()}
    assert not inv["InvMsgCMConditions"].holds(bad)
    (tinv,) = [t for t in m.transition_invariants() if t.name == "cm_precondition"]
    act = Action("recv_upd", (("w", 0), ("w'", 0)))
    assert not tinv.holds(bad, act, K.recv_upd(cfg, bad, 0, 0))


def test_clocks_poset_is_abstract() -> None:
    p = chain3_plus()
    cfg = C.ClocksConfig(p, workers=1)
    assert check(C.ClocksModel(cfg), 6).ok


def test_models_do_not_use_the_production_tracker() -> None:
    """The reference models stay independent of the code they are meant to test."""
    import pathlib

    import pytimely.verify

    root = pathlib.Path(pytimely.verify.__file__).parent
    for path in root.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        for banned in ("progress.reachability", "progress.broadcast", "progress import"):
            assert banned not in text, (path.name, banned)
