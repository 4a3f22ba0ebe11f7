"""The rescaling model of seed ``002_640294948a1fdfd3.txt``: bootstrap, join, leave, invariants, mutants, walks."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from tests.profiles import examples

from pytimely.verify import rescale as R
from pytimely.verify.__main__ import main
from pytimely.verify.checker import CheckResult, check, select_invariants
from pytimely.verify.configs import default_depth, make_model, mutants_for, rescale_config
from pytimely.verify.model import Action
from pytimely.verify.mutants import RESCALE_MUTANTS, Mutant, MutantCase, mutant_cases
from pytimely.verify.rescale import MEMBER, RescaleConfig, RescaleModel, State
from pytimely.verify.rescale.state import _targets
from pytimely.verify.statemachine import state_machine
from pytimely.verify.zmset import ZMSet

JOIN = rescale_config("join")
LEAVE = rescale_config("leave")


def start(cfg: RescaleConfig, holder: int = 0, p: str = "p0") -> State:
    """The initial state in which ``holder`` holds the one capability, at ``p``."""
    for s in R.initial_states(cfg):
        if s.exch.caps[holder] == ZMSet.of(p):
            return s
    raise AssertionError("no such initial state")


def op(cfg: RescaleConfig, s: State, w: int, neg: tuple[Any, ...] = (), self_: tuple[Any, ...] = ()) -> State:
    """``perf_op`` through the model's own successors (so the filters on members apply)."""
    want: tuple[ZMSet[Any], ...] = (ZMSet.of(*neg), ZMSet(), ZMSet.of(*self_))
    for act, s2 in RescaleModel(cfg).successors(s):
        if (
            act.name == "perf_op"
            and act.arg("w") == w
            and (act.arg("Δneg"), act.arg("Δdata"), act.arg("Δself")) == want
        ):
            return s2
    raise AssertionError(f"perf_op by {w} not enabled")


def sent(cfg: RescaleConfig, s: State, w: int) -> State:
    P = frozenset(s.exch.temp[w].keys())
    assert R.send_upd_enabled(cfg, s, w, P)
    return R.send_upd(cfg, s, w, P)


def recv(cfg: RescaleConfig, s: State, w: int, r: int) -> State:
    assert R.recv_upd_enabled(s, w, r)
    return R.recv_upd(cfg, s, w, r)


def joined(cfg: RescaleConfig, s: State, n: int = 2, server: int = 1) -> State:
    assert R.join_enabled(cfg, s, n, server)
    return R.join(cfg, s, n, server)


def with_batch() -> State:
    """Worker 0 holds ``p0``, adds a capability at ``p1`` and sends batch 0 ``{+p1}`` to 0 and 1."""
    s = op(JOIN, start(JOIN), 0, self_=("p1",))
    return sent(JOIN, s, 0)


# --- exhaustive checks --------------------------------------------------------------------------------------


FULL_DEPTHS = {
    "join": default_depth(make_model("rescale")),
    "leave": 6,
    "churn": 6,
    "join-aggregated": 7,
    "leave-aggregated": 6,
}
"""The depths to which the correct model is checked against every invariant, per configuration."""


@cache
def _full_check(config: str) -> CheckResult[State]:
    """The check of the correct model against every invariant to its depth in :data:`FULL_DEPTHS` (run once: it
    is pure, and the mutant cases of the same configuration read it too)."""
    return check(make_model("rescale", config), FULL_DEPTHS[config])


def test_default_check_finds_no_violation() -> None:
    """The command line's default run (``join``, depth 9), every invariant."""
    assert FULL_DEPTHS["join"] == 9
    r = _full_check("join")
    assert r.violation is None, [str(st.action) for st in r.trace]
    assert r.states > 50_000 and r.transitions > r.states


@pytest.mark.parametrize("config", ["leave", "churn"])
def test_leave_and_churn_no_violation(config: str) -> None:
    r = _full_check(config)
    assert r.violation is None, [str(st.action) for st in r.trace]
    assert r.states > 5_000


def test_every_action_is_reached_by_the_default_check() -> None:
    """The bootstrap and leave actions all occur within the checked depths (the checks are not vacuous): within 8
    steps of ``join`` or 5 of ``leave``, read off the full checks' breadth-first searches (the same searches, deeper)
    rather than searched again."""
    names: set[str] = set()
    for config, depth in (("join", 8), ("leave", 5)):
        r = _full_check(config)
        assert r.ok and r.depth > depth
        names |= {name for name, step in r.first_steps.items() if step <= depth}
    assert {
        "perf_op",
        "send_upd",
        "recv_upd",
        "recv_cap",
        "join",
        "bootstrap_state",
        "range_request",
        "range_reply",
        "announce",
        "bootstrap_done",
        "leave",
        "hand_over",
        "disconnect",
    } <= names


def test_first_steps_are_those_of_a_breadth_first_search() -> None:
    """:attr:`CheckResult.first_steps`, which the test above reads, against a search written out here."""
    m = make_model("rescale", "leave")
    first: dict[str, int] = {}
    layer = list(dict.fromkeys(m.initial_states()))
    seen = set(layer)
    for step in range(1, 5):
        nxt = []
        for s in layer:
            for act, s2 in m.successors(s):
                first.setdefault(act.name, step)
                if s2 not in seen:
                    seen.add(s2)
                    nxt.append(s2)
        layer = nxt
    assert check(m, 4).first_steps == first and len(set(first.values())) > 1


# --- mutants ------------------------------------------------------------------------------------------------

CASES = [c for c in mutant_cases() if c.model == "rescale"]


def test_every_rescale_mutant_has_a_case() -> None:
    assert {c.mutant for c in CASES} == RESCALE_MUTANTS == set(mutants_for("rescale"))
    assert {c.mutant for c in CASES if c.invariant == "Safe"} == RESCALE_MUTANTS


@cache
def _correct_model_passes(config: str, depth: int, only: tuple[str, ...]) -> bool:
    """Whether the correct model passes the check a mutant fails; several mutants share one (a check is pure).

    Where the full check of the configuration goes at least as deep, it decides: a check to a depth against some
    invariants explores the same states and transitions as the first layers of a deeper one against every
    invariant, and finds a violation only where that one would."""
    full = FULL_DEPTHS.get(config)
    if full is not None and depth <= full:
        select_invariants(make_model("rescale", config), only)  # names only invariants the full check checks
        r = _full_check(config)
        return r.ok and r.passed_depth >= depth
    return check(make_model("rescale", config), depth, invariants=list(only) or None).ok


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.mutant.value}-{c.config}-{c.invariant}")
def test_the_correct_model_passes_the_check_that_catches_a_mutant(case: MutantCase) -> None:
    """The mutant's own side (caught by the stated invariant, by a real path of exactly ``depth`` steps, not one
    step shallower) is checked for every case of :func:`mutant_cases` in ``tests/verify/test_mutants.py``."""
    assert _correct_model_passes(case.config, case.depth, case.only)


def test_off_by_one_keeps_the_numbers_and_loses_the_content() -> None:
    """``range-off-by-one`` records the right next numbers (``NoGap`` holds) but misses a batch's updates."""
    model = make_model("rescale", mutant=Mutant.RANGE_OFF_BY_ONE)
    assert check(model, 8, invariants=["NoGap"]).ok


def test_mutants_stay_in_their_model() -> None:
    with pytest.raises(ValueError):
        make_model("rescale", mutant=Mutant.MINT_EQUAL)
    with pytest.raises(ValueError):
        make_model("exchange", mutant=Mutant.LEAVE_DROPS_EARLY)
    with pytest.raises(ValueError):
        rescale_config("nope")


# --- random walks -------------------------------------------------------------------------------------------

SETTINGS = settings(
    max_examples=examples(30), stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _run(machine: type, s: settings = SETTINGS) -> None:
    machine.TestCase.settings = s  # type: ignore[attr-defined]
    machine.TestCase().runTest()  # type: ignore[attr-defined]


def test_state_machine_churn_large() -> None:
    """Three members, two joiners, two leaves, three pointstamps, wider bounds."""
    _run(state_machine(make_model("rescale", "churn-large")))


def test_state_machine_four_members() -> None:
    _run(state_machine(make_model("rescale", "churn-large", 4)), settings(SETTINGS, max_examples=examples(15)))


def test_state_machine_finds_leave_drops_early() -> None:
    machine = state_machine(make_model("rescale", "churn", mutant=Mutant.LEAVE_DROPS_EARLY), ["Safe"])
    with pytest.raises(AssertionError, match="violation of Safe"):
        _run(
            machine,
            settings(
                SETTINGS,
                max_examples=examples(2000),
                stateful_step_count=10,
                phases=[Phase.generate],
                print_blob=False,
            ),
        )


# --- join and the bootstrap protocol on hand-made states ----------------------------------------------------


def test_join_links_start_with_the_next_number() -> None:
    s = joined(JOIN, with_batch())
    assert s.status == "mmj" and s.boot is not None
    assert s.boot.hello == (1, 0, None)  # 0 has sent batch 0, 1 nothing; no link from the newcomer to itself
    assert not R.join_enabled(JOIN, s, 2, 0)  # one membership change at a time
    assert not R.leave_enabled(LEAVE, s, 0, 1)
    bad = RescaleConfig(JOIN.poset, max_caps=1, mutant=Mutant.NO_BOOTSTRAP_MESSAGE)
    t = R.join(bad, with_batch(), 2, 1)
    assert t.boot is not None and t.boot.hello == (None, None, None)
    # a batch sent after the join goes to the newcomer too, numbered after the bootstrap message
    s = sent(JOIN, op(JOIN, s, 0, neg=("p1",)), 0)
    assert s.links[0][2] == ((1, ZMSet({"p1": -1})),)


def test_bootstrap_state_and_missing_ranges() -> None:
    s = joined(JOIN, with_batch())
    assert R.missing_range(JOIN, s.boot, 0) is None  # type: ignore[arg-type]
    assert R.bootstrap_state_enabled(s) and not R.bootstrap_done_enabled(JOIN, s)
    s = R.bootstrap_state(JOIN, s)
    assert s.exch.glob[2] == s.exch.glob[1] == ZMSet.of("p0")
    assert s.boot is not None and s.boot.base == (0, 0, 0)
    assert R.missing_range(JOIN, s.boot, 0) == (0, 1) and R.missing_range(JOIN, s.boot, 1) == (0, 0)
    off = RescaleConfig(JOIN.poset, max_caps=1, mutant=Mutant.RANGE_OFF_BY_ONE)
    assert R.missing_range(off, s.boot, 0) == (1, 1)
    assert R.bootstrap_done_enabled(off, s)  # the broken newcomer thinks nothing is missing
    assert not R.range_request_enabled(JOIN, s, 1) and R.range_request_enabled(JOIN, s, 0)
    assert not R.bootstrap_done_enabled(JOIN, s)
    s = R.range_request(JOIN, s, 0)
    assert not R.range_request_enabled(JOIN, s, 0)
    # the server answers only once it has received the batches itself (step 8)
    assert not R.range_reply_enabled(s, 0, 0, 1)
    s = recv(JOIN, s, 0, 1)
    assert R.range_reply_enabled(s, 0, 0, 1)
    s = R.range_reply(JOIN, s, 0, 0, 1)
    assert s.exch.glob[2] == ZMSet.of("p0", "p1") and s.boot is not None and s.boot.filled == {0}
    assert R.bootstrap_done_enabled(JOIN, s)
    s = R.bootstrap_done(JOIN, s)
    assert s.status == "mmm" and s.boot is None and s.recvd[2] == (1, 0, 0)
    assert R.BootstrapView(JOIN, s) and R.NoGap(JOIN, s) and R.Safe(JOIN, s)


def test_state_ahead_of_a_link_is_not_applied_twice() -> None:
    """The server's state may already include a batch sent after the join: the newcomer discards it on its link."""
    s = joined(JOIN, start(JOIN))
    assert s.boot is not None and s.boot.hello == (0, 0, None)
    s = sent(JOIN, op(JOIN, s, 0, self_=("p1",)), 0)
    s = recv(JOIN, s, 0, 1)  # the server applies batch 0 before sending its state
    s = R.bootstrap_state(JOIN, s)
    assert s.boot is not None and s.boot.base == (1, 0, 0)
    assert not R.range_request_enabled(JOIN, s, 0)
    s = R.bootstrap_done(JOIN, s)
    assert s.recvd[2] == (1, 0, 0) and s.links[0][2] == ((0, ZMSet.of("p1")),)
    view = s.exch.glob[2]
    s = recv(JOIN, s, 0, 2)
    assert s.exch.glob[2] == view == ZMSet.of("p0", "p1") and not s.links[0][2]
    assert R.BootstrapView(JOIN, s) and R.NoGap(JOIN, s)


def test_newcomer_reads_its_links_only_as_a_member() -> None:
    s = sent(JOIN, op(JOIN, joined(JOIN, start(JOIN)), 0, self_=("p1",)), 0)
    assert s.links[0][2] and not R.recv_upd_enabled(s, 0, 2)
    # it holds no capability and operates on nothing before it is a member
    assert all(act.arg("w") != 2 for act, _ in RescaleModel(JOIN).successors(s) if act.name == "perf_op")


def test_announce_needs_a_capability_strictly_below() -> None:
    s = R.bootstrap_state(JOIN, joined(JOIN, start(JOIN, holder=1), server=1))
    assert R.announce_enabled(JOIN, s, "p1") and not R.announce_enabled(JOIN, s, "p0")
    t = R.announce(JOIN, s, "p1")
    assert t.exch.data == ZMSet.of((2, "p1")) and t.exch.temp[1] == ZMSet.of("p1")
    assert t.exch.caps[1] == ZMSet.of("p0") and not R.announce_enabled(JOIN, t, "p1")  # one per newcomer
    # the newcomer receives it once a member, and retires it with an ordinary perf_op
    assert not any(a.name == "recv_cap" for a, _ in RescaleModel(JOIN).successors(t))
    t = R.bootstrap_done(JOIN, t)
    got = [s2 for a, s2 in RescaleModel(JOIN).successors(t) if a.name == "recv_cap" and a.arg("w") == 2]
    assert len(got) == 1 and got[0].exch.caps[2] == ZMSet.of("p1")
    retired = op(JOIN, got[0], 2, neg=("p1",))
    assert retired.exch.temp[2] == ZMSet({"p1": -1}) and R.Safe(JOIN, retired)
    # §6.2 as worded: the server's view alone is enough, even for a pointstamp it does not hold
    worded = RescaleConfig(JOIN.poset, max_caps=1, mutant=Mutant.ANNOUNCE_AT_VIEW_FRONTIER)
    u = R.bootstrap_state(JOIN, joined(JOIN, start(JOIN, holder=0), server=1))
    assert not R.announce_enabled(JOIN, u, "p0") and R.announce_enabled(worded, u, "p0")
    assert not R.announce_enabled(worded, u, "p1")  # p1 is not at the frontier of the view


# --- leave on hand-made states ------------------------------------------------------------------------------


def test_leave_hands_over_after_a_flush_then_disconnects() -> None:
    s = op(LEAVE, start(LEAVE, holder=2), 2, self_=("p1",))
    assert R.leave_enabled(LEAVE, s, 2, 0) and not R.leave_enabled(LEAVE, s, 2, 2)
    s = R.leave(LEAVE, s, 2, 0)
    assert s.status == "mml" and s.leave is not None and not s.exch.glob[2]
    assert not R.leave_enabled(LEAVE, s, 1, 0)  # one change at a time, and at most max_leaves
    assert not R.hand_over_enabled(LEAVE, s)  # an unsent update
    s = sent(LEAVE, s, 2)
    assert s.links[2][2] == () and len(s.links[2][0]) == 1  # the leaver's incoming links are closed
    assert not R.hand_over_enabled(LEAVE, s)  # its batch is not yet applied everywhere
    s = recv(LEAVE, recv(LEAVE, s, 2, 0), 2, 1)
    assert R.hand_over_enabled(LEAVE, s) and not R.disconnect_enabled(s)
    s = R.hand_over(LEAVE, s)
    assert not s.exch.caps[2] and s.exch.data == ZMSet({(0, "p0"): 1, (0, "p1"): 1}) and not s.exch.temp[2]
    assert R.disconnect_enabled(s)
    s = R.disconnect(LEAVE, s)
    assert s.status == "mmx" and s.leave is None
    for name in ("Safe", "BootstrapView", "NoGap", "glob", "Accounting", "Membership"):
        (inv,) = [i for i in RescaleModel(LEAVE).invariants() if i.name == name]
        assert inv.holds(s), name


def test_no_leave_while_a_capability_is_on_its_way() -> None:
    s = start(LEAVE, holder=0)
    for act, s2 in RescaleModel(LEAVE).successors(s):
        if act.name == "perf_op" and act.arg("Δdata"):
            ((r, _),) = act.arg("Δdata").keys()
            assert not R.leave_enabled(LEAVE, s2, r, (r + 1) % 3)
            break
    else:
        raise AssertionError("no perf_op sends a capability")


def test_leave_drops_early_reports_then_remints() -> None:
    bad = rescale_config("leave", mutant=Mutant.LEAVE_DROPS_EARLY)
    s = R.leave(bad, start(bad, holder=2), 2, 0)
    assert not s.exch.caps[2] and s.exch.temp[2] == ZMSet({"p0": -1})
    assert R.hand_over_enabled(bad, s)  # no flush needed
    s = recv(bad, sent(bad, s, 2), 2, 0)
    assert len(s.exch.glob[0]) == 0 and R.Safe(bad, s)
    s = R.hand_over(bad, s)
    assert s.exch.data == ZMSet.of((0, "p0")) and not R.Safe(bad, s)


# --- invariants on hand-made states -------------------------------------------------------------------------


def test_invariants_reject_bad_states() -> None:
    s = R.bootstrap_done(JOIN, R.bootstrap_state(JOIN, joined(JOIN, start(JOIN))))
    assert R.BootstrapView(JOIN, s) and R.NoGap(JOIN, s) and R.Membership(JOIN, s) and R.Accounting(JOIN, s)
    lost = s._replace(exch=s.exch._replace(glob=(*s.exch.glob[:2], ZMSet())))
    assert not R.BootstrapView(JOIN, lost) and R.NoGap(JOIN, lost)
    s = sent(JOIN, op(JOIN, s, 0, self_=("p1",)), 0)
    skipped = s._replace(recvd=(s.recvd[0], s.recvd[1], (1, 0, 0)))  # takes batch 0 as applied: it is not
    assert not R.BootstrapView(JOIN, skipped) and R.NoGap(JOIN, skipped)
    dropped = s._replace(links=((*s.links[0][:2], ()), *s.links[1:]))  # batch 0 never reaches the newcomer
    assert not R.NoGap(JOIN, dropped) and not R.BootstrapView(JOIN, dropped)
    stray = s._replace(exch=s.exch._replace(caps=(*s.exch.caps[:2], ZMSet.of("p0"))), status="mm-")
    assert not R.Membership(JOIN, stray) and not R.Accounting(JOIN, stray)
    hole = s._replace(exch=s.exch._replace(glob=(ZMSet(), *s.exch.glob[1:])))
    assert not R.glob_lemma(JOIN, hole)


def test_successors_are_enabled_and_never_stutter() -> None:
    m = make_model("rescale", "churn")
    s = with_batch()
    for act, s2 in m.successors(joined(JOIN, s)):
        assert isinstance(act, Action) and s2 != s


def test_configurations_and_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert rescale_config("leave").workers == 3 and rescale_config("join", 3).members == 3
    assert make_model("rescale", "churn-large").cfg.workers == 5  # type: ignore[attr-defined]
    assert all(st == MEMBER for st in next(iter(R.initial_states(LEAVE))).status)
    assert main(["rescale", "--depth", "4"]) == 0
    out = capsys.readouterr().out
    assert "model: rescale  config: join  workers: 3" in out and out.rstrip().endswith("no violation")
    assert main(["rescale", "--mutant", "leave-drops-early", "--invariant", "Safe"]) == 1
    out = capsys.readouterr().out
    assert "config: leave" in out and "violation of Safe" in out and "counterexample (4 steps)" in out


# --- concurrent joins and the clone rule ------------------------------------------------------------------

JOINS = rescale_config("joins")


def test_concurrent_joins_no_violation() -> None:
    result = check(make_model("rescale", "joins"), 7)
    assert result.violation is None and result.states > 10_000


def test_a_newcomer_joins_while_another_bootstraps() -> None:
    s = R.join(JOINS, sent(JOINS, op(JOINS, start(JOINS), 0, self_=("p1",)), 0), 2, 0)
    assert not R.join_enabled(JOIN, R.join(JOIN, start(JOIN), 2, 0), 1, 0)  # one at a time by default
    assert R.join_enabled(JOINS, s, 3, 0)
    t = R.join(JOINS, s, 3, 0)
    assert t.status == "mmjj" and [b.newcomer for b in t.boots] == [2, 3]
    # 3's links start with the members' numbers and 2's (a newcomer has sent nothing); 2 counts 3 from zero
    assert t.boots[1].hello == (1, 0, 0, None) and t.boots[0].hello == (1, 0, None, 0)
    assert not R.join_enabled(JOINS, t, 1, 0) and not R.leave_enabled(replace(JOINS, max_leaves=1), t, 1, 0)
    # each bootstrap goes on by itself: 3's state first, then 2 finishes while 3 is still bootstrapping
    t = R.bootstrap_state(JOINS, t, 3)
    assert t.boots[0].base is None and t.boots[1].base == (0, 0, 0, 0)
    t = R.bootstrap_state(JOINS, t, 2)
    t = R.range_request(JOINS, t, 0, 2)
    t = recv(JOINS, t, 0, 0)
    t = R.range_reply(JOINS, t, 0, 0, 1, 2)
    assert R.bootstrap_done_enabled(JOINS, t, 2)
    t = R.bootstrap_done(JOINS, t, 2)
    assert t.status == "mmmj" and [b.newcomer for b in t.boots] == [3]
    assert RescaleModel(JOINS).invariants()[0].holds(t)


def test_announce_clone_mints_at_a_held_time() -> None:
    clone = RescaleConfig(JOIN.poset, max_caps=1, mutant=Mutant.ANNOUNCE_CLONE)
    s = R.bootstrap_state(JOIN, joined(JOIN, start(JOIN, holder=1), server=1))
    assert R.announce_enabled(clone, s, "p0") and R.announce_enabled(clone, s, "p1")
    assert not R.announce_enabled(JOIN, s, "p0")
    # the server keeps its own p0 and reports the copy's +1 in temp: Fig. 4's justification is broken at once
    t = R.announce(clone, s, "p0")
    assert t.exch.caps[1] == ZMSet.of("p0") and t.exch.temp[1] == ZMSet.of("p0")
    assert not RescaleModel(clone).invariants()[5].holds(t)  # InvTempJustified


# --- aggregated senders (a process's outbox and its aggregate sender) ---------------------------------------

AGG = rescale_config("join-aggregated")
"""Workers 0 and 1 in process 0, worker 2 in process 1; worker 3 joins in process 2 (aggregate senders 4, 5, 6)."""


def test_aggregated_senders_keep_every_invariant() -> None:
    for config, depth in (("join-aggregated", 7), ("leave-aggregated", 6)):
        r = _full_check(config)
        assert r.depth == depth and r.violation is None, (config, [str(st.action) for st in r.trace])
        assert r.states > 10_000


def test_a_batch_reaches_its_own_process_directly_and_the_others_combined() -> None:
    assert (AGG.processes, AGG.senders, AGG.aggregate(1)) == ((0, 0, 1, 2), 7, 5)
    assert [AGG.feeds(w, 0) for w in range(7)] == [True, True, False, False, False, True, True]
    s = sent(AGG, op(AGG, start(AGG), 0, self_=("p1",)), 0)
    assert s.links[0][0] and s.links[0][1] and not s.links[0][2]
    assert s.out[0] == ((0, ZMSet.of("p1")),) and not s.hist[4]
    s = sent(AGG, op(AGG, s, 0, neg=("p1",)), 0)
    assert R.agg_send_enabled(AGG, s, 0, 2) and not R.agg_send_enabled(AGG, s, 1, 1)
    cancelled = R.agg_send(AGG, s, 0, 2)  # +p1 and -p1: nothing leaves, no number is used
    assert cancelled.out[0] == () and not cancelled.hist[4] and not cancelled.links[4][2]
    one = R.agg_send(AGG, s, 0, 1)
    assert one.links[4][2] == ((0, ZMSet.of("p1")),) and one.hist[4] == (ZMSet.of("p1"),)
    assert R.BootstrapView(AGG, one) and R.NoGap(AGG, one)


def test_the_server_takes_its_state_once_its_process_is_flushed_and_drained() -> None:
    s = sent(AGG, op(AGG, start(AGG, holder=2), 2, self_=("p1",)), 2)  # process 1's only worker, in its outbox
    s = R.join(AGG, recv(AGG, s, 2, 2), 3, 2)
    assert s.boot is not None and s.boot.hello == (None, None, None, None, 0, 0, None)
    assert not R.bootstrap_state_enabled(s, 3, AGG), "its outbox still holds what the server applied"
    unflushed = replace(AGG, mutant=Mutant.STATE_UNFLUSHED)
    assert R.bootstrap_state_enabled(s, 3, unflushed)
    s = R.agg_send(AGG, s, 1, 1)
    assert R.bootstrap_state_enabled(s, 3, AGG)
    s = R.bootstrap_state(AGG, s, 3)
    # The state includes process 1's first combined batch (it holds +p1): the newcomer will not apply it again.
    assert s.boot is not None and s.boot.base is not None and s.boot.base[5] == 1
    s = R.bootstrap_done(AGG, s, 3)
    assert s.recvd[3][5] == 1 and s.links[5][3] == ((0, ZMSet.of("p1")),)
    assert R.BootstrapView(AGG, s) and R.NoGap(AGG, s)
    skips = replace(AGG, mutant=Mutant.AGGREGATE_SKIPS_NEWCOMER)
    assert _targets(skips, R.join(AGG, start(AGG), 3, 0), 5) == [0, 1]
