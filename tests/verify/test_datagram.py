"""The data-exchange model of seed ``003_f357c44874202187.txt``: transitions, invariants, mutants, random walks."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from tests.profiles import examples

from pytimely.verify import datagram as G
from pytimely.verify.__main__ import main
from pytimely.verify.checker import check
from pytimely.verify.configs import datagram_config, default_depth, make_model, mutants_for
from pytimely.verify.datagram import CONTROL, DATA, PROGRESS, Datagram, DatagramConfig, DatagramModel, State
from pytimely.verify.model import Action
from pytimely.verify.mutants import DATAGRAM_MUTANTS, Mutant, MutantCase, mutant_cases
from pytimely.verify.statemachine import state_machine

FAR = DatagramConfig(2, max_messages=3, max_faults=1, name="test-far")
"""Two locations that are not neighbours: between them everything crosses the Network."""
NEAR = DatagramConfig(2, neighbors=frozenset({(0, 1)}), max_messages=3, name="test-near")


def start(cfg: DatagramConfig = FAR) -> State:
    (s,) = G.initial_states(cfg)
    return s


def sent(cfg: DatagramConfig, s: State, sender: int, receivers: set[int], channel: str) -> State:
    rs = frozenset(receivers)
    assert G.send_enabled(cfg, s, sender, rs, channel)
    return G.send(cfg, s, sender, rs, channel)


def moved(cfg: DatagramConfig, s: State, d: Datagram) -> State:
    assert G.transport_enabled(cfg, s, d), d
    return G.transport(cfg, s, d)


def dg(channel: str, sender: int, receiver: int, seq: int = 0, well_formed: bool = True) -> Datagram:
    prec = {"data": DATA, "progress": PROGRESS, "control": CONTROL}[channel]
    return Datagram(channel, sender, receiver, seq, prec, well_formed)


# --- exhaustive checks --------------------------------------------------------------------------------------


def test_default_config_every_reachable_state_is_clean() -> None:
    """The command line's default run: every reachable state of ``far``, no invariant violated."""
    m = make_model("datagram")
    r = check(m, default_depth(m))
    assert r.violation is None, [str(s.action) for s in r.trace]
    assert r.complete and r.states > 20_000 and r.transitions > r.states


@pytest.mark.parametrize(("config", "locations", "depth"), [("mixed", None, 6), ("far", 1, 20), ("far", 3, 4)])
def test_other_networks_no_violation(config: str, locations: int | None, depth: int) -> None:
    r = check(make_model("datagram", config, locations), depth)
    assert r.violation is None, [str(s.action) for s in r.trace]
    assert r.states > 100


def test_successors_are_enabled_and_never_stutter() -> None:
    m = make_model("datagram")
    r = check(m, 3)
    assert r.ok
    s = sent(m.cfg, start(m.cfg), 0, {0, 1}, "data")  # type: ignore[attr-defined]
    for act, s2 in m.successors(s):
        assert isinstance(act, Action) and s2 != s
        assert act.name in {"send", "transport", "receive", "corrupt"}


# --- mutants ------------------------------------------------------------------------------------------------

CASES = [c for c in mutant_cases() if c.model == "datagram"]


def test_every_datagram_mutant_has_a_case() -> None:
    assert {c.mutant for c in CASES} == DATAGRAM_MUTANTS == set(mutants_for("datagram"))
    assert not DATAGRAM_MUTANTS & set(mutants_for("combined"))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.mutant.value}-{c.invariant}")
def test_mutant_is_caught_by_the_stated_invariant(case: MutantCase) -> None:
    model = make_model("datagram", case.config, mutant=case.mutant)
    only = list(case.only) or None
    r = check(model, case.depth, invariants=only)
    assert r.violation == case.invariant
    assert len(r.trace) - 1 == case.depth
    for prev, nxt in zip(r.trace, r.trace[1:], strict=False):
        assert (nxt.action, nxt.state) in list(model.successors(prev.state))
    assert r.passed_depth == case.depth - 1  # nothing one step shallower (test_mutants: a prefix of this search)
    # the correct model passes the same check at the same depth
    assert check(make_model("datagram", case.config), case.depth, invariants=only).ok


def test_loss_is_invisible_to_the_seeds_own_invariant() -> None:
    """A datagram in no place is in no two places: only Conservation sees ``transport-loses``."""
    model = make_model("datagram", mutant=Mutant.TRANSPORT_LOSES)
    seed_only = ["OnePlace", "DeliverPrecedence", "TransportPrecedence", "ReceivePrecedence", "ReceiveWellFormed"]
    assert check(model, 6, invariants=seed_only).ok


def test_mutants_stay_in_their_model() -> None:
    with pytest.raises(ValueError):
        make_model("datagram", mutant=Mutant.MINT_EQUAL)
    with pytest.raises(ValueError):
        make_model("combined", mutant=Mutant.RECEIVE_REORDERS)
    with pytest.raises(ValueError):
        DatagramConfig(mutant=Mutant.DROP_SUMMARY)


# --- random walks -------------------------------------------------------------------------------------------

SETTINGS = settings(
    max_examples=examples(40), stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _run(machine: type, s: settings = SETTINGS) -> None:
    machine.TestCase.settings = s  # type: ignore[attr-defined]
    machine.TestCase().runTest()  # type: ignore[attr-defined]


def test_state_machine_far_large() -> None:
    """Two locations, four messages each to any receivers, two faults."""
    _run(state_machine(make_model("datagram", "far-large")))


def test_state_machine_mixed_large_four_locations() -> None:
    """Four locations (0 and 1 neighbours, the others far), three messages each, two faults."""
    _run(state_machine(make_model("datagram", "mixed-large", 4)), settings(SETTINGS, max_examples=examples(25)))


def test_state_machine_finds_reordering() -> None:
    machine = state_machine(make_model("datagram", "far-large", mutant=Mutant.RECEIVE_REORDERS), ["FifoPerChannel"])
    with pytest.raises(AssertionError, match="violation of FifoPerChannel"):
        _run(machine, settings(SETTINGS, max_examples=examples(500), phases=[Phase.generate], print_blob=False))


# --- Send ---------------------------------------------------------------------------------------------------


def test_send_makes_one_datagram_per_receiver_numbered_per_channel_and_sender() -> None:
    s = sent(FAR, start(), 0, {0, 1}, "data")
    assert s.out[0] == {dg("data", 0, 0), dg("data", 0, 1)}
    s = sent(FAR, s, 0, {1}, "data")
    s = sent(FAR, s, 0, {1}, "control")
    assert dg("data", 0, 1, 1) in s.out[0] and dg("control", 0, 1, 0) in s.out[0]
    assert s.sent == {d.ident for d in s.out[0]}
    assert not any(s.inbuf) and not s.network


def test_send_needs_a_consistent_message_and_budget() -> None:
    cfg = DatagramConfig(2, consistent=frozenset({("data", 0)}), max_messages=1)
    s = start(cfg)
    assert not G.send_enabled(cfg, s, 0, frozenset({1}), "control")
    assert not G.send_enabled(cfg, s, 1, frozenset({0}), "data")
    assert not G.send_enabled(cfg, s, 0, frozenset(), "data")
    s = sent(cfg, s, 0, {1}, "data")
    assert not G.send_enabled(cfg, s, 0, frozenset({1}), "data")
    total = DatagramConfig(2, max_messages=2, max_total=1)
    s = sent(total, start(total), 0, {1}, "data")
    assert not G.send_enabled(total, s, 1, frozenset({0}), "data")


# --- Transport ----------------------------------------------------------------------------------------------


def test_transport_routes_by_neighbor() -> None:
    s = sent(FAR, start(), 0, {0, 1}, "data")
    s = moved(FAR, s, dg("data", 0, 0))
    assert s.inbuf[0] == {dg("data", 0, 0)}  # loopback: a location is its own neighbour
    s = moved(FAR, s, dg("data", 0, 1))
    assert s.network == {dg("data", 0, 1)} and not s.inbuf[1]
    s = moved(FAR, s, dg("data", 0, 1))
    assert not s.network and s.inbuf[1] == {dg("data", 0, 1)} and not any(s.out)
    t = moved(NEAR, sent(NEAR, start(NEAR), 0, {1}, "data"), dg("data", 0, 1))
    assert t.inbuf[1] == {dg("data", 0, 1)} and not t.network


def test_transport_refuses_lower_precedence_while_higher_is_eligible_anywhere() -> None:
    s = sent(FAR, start(), 0, {1}, "data")
    s = sent(FAR, s, 1, {0}, "control")  # at the other location
    s = sent(FAR, s, 0, {1}, "progress")
    assert not G.transport_enabled(FAR, s, dg("data", 0, 1))
    assert not G.transport_enabled(FAR, s, dg("progress", 0, 1))
    s = moved(FAR, s, dg("control", 1, 0))  # into the Network: still eligible
    assert not G.transport_enabled(FAR, s, dg("progress", 0, 1))
    s = moved(FAR, s, dg("control", 1, 0))
    assert not G.transport_enabled(FAR, s, dg("data", 0, 1))
    assert G.transport_enabled(FAR, s, dg("progress", 0, 1))
    mutant = DatagramConfig(2, max_messages=3, mutant=Mutant.TRANSPORT_IGNORES_PRECEDENCE)
    assert G.transport_enabled(mutant, s, dg("data", 0, 1))


def test_transport_takes_the_oldest_of_a_stream_at_its_place() -> None:
    s = sent(FAR, start(), 0, {1}, "data")
    s = sent(FAR, s, 0, {1}, "data")
    assert not G.transport_enabled(FAR, s, dg("data", 0, 1, 1))
    s = moved(FAR, s, dg("data", 0, 1, 0))
    # the older one is now in the Network; each place keeps its own order
    assert G.transport_enabled(FAR, s, dg("data", 0, 1, 1))
    assert G.transport_enabled(FAR, s, dg("data", 0, 1, 0))
    # another stream of equal precedence is not held up
    s = sent(FAR, s, 1, {0}, "data")
    assert G.transport_enabled(FAR, s, dg("data", 1, 0))


def test_transport_mutant_effects() -> None:
    s = sent(FAR, start(), 0, {1}, "data")
    dup = DatagramConfig(2, mutant=Mutant.TRANSPORT_DUPLICATES)
    s2 = G.transport(dup, s, dg("data", 0, 1))
    assert not G.OnePlace(dup, s2) and not G.Conservation(dup, s2)
    lose = DatagramConfig(2, mutant=Mutant.TRANSPORT_LOSES)
    s3 = G.transport(lose, G.transport(lose, s, dg("data", 0, 1)), dg("data", 0, 1))
    assert G.OnePlace(lose, s3) and not G.Conservation(lose, s3)
    with pytest.raises(ValueError):
        G.transport(FAR, start(), dg("data", 0, 1))


# --- Receive and corrupt ------------------------------------------------------------------------------------


def delivered_both() -> State:
    """``0`` sends data then control to itself; both are in ``In_Buffer(0)``."""
    s = sent(FAR, start(), 0, {0}, "data")
    s = sent(FAR, s, 0, {0}, "control")
    s = moved(FAR, s, dg("control", 0, 0))
    return moved(FAR, s, dg("data", 0, 0))


def test_receive_takes_the_highest_precedence_first() -> None:
    s = delivered_both()
    assert not G.receive_enabled(FAR, s, 0, dg("data", 0, 0))
    assert G.receive_enabled(FAR, s, 0, dg("control", 0, 0))
    assert not G.receive_enabled(FAR, s, 1, dg("control", 0, 0))
    s = G.receive(FAR, s, 0, dg("control", 0, 0))
    assert s.action[0] == {dg("control", 0, 0)}
    assert G.receive_enabled(FAR, s, 0, dg("data", 0, 0))


def test_receive_keeps_stream_order() -> None:
    s = sent(FAR, start(), 0, {0}, "data")
    s = sent(FAR, s, 0, {0}, "data")
    s = moved(FAR, moved(FAR, s, dg("data", 0, 0, 0)), dg("data", 0, 0, 1))
    assert not G.receive_enabled(FAR, s, 0, dg("data", 0, 0, 1))
    s2 = G.receive(FAR, s, 0, dg("data", 0, 0, 0))
    assert G.receive_enabled(FAR, s2, 0, dg("data", 0, 0, 1))
    bad = G.receive(FAR, s, 0, dg("data", 0, 0, 1))  # what receive-reorders allows
    assert not G.FifoPerChannel(FAR, bad) and G.Conservation(FAR, bad)


def test_malformed_datagrams_are_discarded_not_handed_on() -> None:
    s = sent(FAR, start(), 0, {0, 1}, "data")
    assert not G.corrupt_enabled(FAR, s, dg("data", 0, 1))  # an Out_Buffer is not in transit
    s = moved(FAR, moved(FAR, s, dg("data", 0, 1)), dg("data", 0, 0))
    assert G.corrupt_enabled(FAR, s, dg("data", 0, 1)) and G.corrupt_enabled(FAR, s, dg("data", 0, 0))
    s = G.corrupt(FAR, s, dg("data", 0, 1))
    assert s.network == {dg("data", 0, 1, well_formed=False)} and s.faults == 1
    assert not G.corrupt_enabled(FAR, s, dg("data", 0, 0))  # the fault budget is spent
    s = moved(FAR, s, dg("data", 0, 1, well_formed=False))
    s = G.receive(FAR, s, 1, dg("data", 0, 1, well_formed=False))
    assert not s.action[1] and s.discarded[1] == {dg("data", 0, 1, well_formed=False)}
    assert G.Conservation(FAR, s) and G.FifoPerChannel(FAR, s) and G.OnlyWellFormedReceived(FAR, s)
    accepts = DatagramConfig(2, mutant=Mutant.RECEIVE_ACCEPTS_MALFORMED)
    t = G.corrupt(FAR, moved(FAR, sent(FAR, start(), 0, {0}, "data"), dg("data", 0, 0)), dg("data", 0, 0))
    t2 = G.receive(accepts, t, 0, dg("data", 0, 0, well_formed=False))
    assert not G.OnlyWellFormedReceived(accepts, t2)
    assert not G.receive_well_formed(accepts, t, Action("receive"), t2)


# --- invariants on hand-made states -------------------------------------------------------------------------


def test_state_invariants_reject_bad_states() -> None:
    s = sent(FAR, start(), 0, {1}, "data")
    d = dg("data", 0, 1)
    assert G.OnePlace(FAR, s) and G.Conservation(FAR, s)
    both = s._replace(network=frozenset({d}))
    assert not G.OnePlace(FAR, both) and not G.Conservation(FAR, both)
    assert not G.OnePlace(FAR, s._replace(network=frozenset({d._replace(well_formed=False)})))
    wrong_place = s._replace(out=(frozenset(), frozenset()), inbuf=(frozenset({d}), frozenset()))
    assert G.OnePlace(FAR, wrong_place) and not G.Conservation(FAR, wrong_place)
    unsent = s._replace(action=(frozenset({dg("data", 1, 0)}), frozenset()))
    assert not G.Conservation(FAR, unsent)
    s = sent(FAR, s, 0, {1}, "data")
    gap = s._replace(out=(frozenset({d}), frozenset()), action=(frozenset(), frozenset({dg("data", 0, 1, 1)})))
    assert not G.FifoPerChannel(FAR, gap) and G.Conservation(FAR, gap)


def test_constraint_clauses_reject_bad_steps() -> None:
    s = sent(FAR, start(), 0, {0}, "data")
    s = sent(FAR, s, 0, {0}, "control")
    act = Action("transport")
    low_first = s._replace(
        out=(frozenset({dg("control", 0, 0)}), frozenset()), inbuf=(frozenset({dg("data", 0, 0)}), frozenset())
    )
    assert not G.deliver_precedence(FAR, s, act, low_first)
    assert not G.transport_precedence(FAR, s, act, low_first)
    vanished = s._replace(out=(frozenset({dg("control", 0, 0)}), frozenset()))
    assert not G.transport_precedence(FAR, s, act, vanished)
    good = moved(FAR, s, dg("control", 0, 0))
    assert G.deliver_precedence(FAR, s, act, good) and G.transport_precedence(FAR, s, act, good)
    s = delivered_both()
    low = s._replace(inbuf=(frozenset({dg("control", 0, 0)}), frozenset()))
    assert not G.receive_precedence(FAR, s, Action("receive"), low)
    # damage does not change which datagram it is: corrupting a low-precedence datagram is no Receive
    hurt = G.corrupt(FAR, s, dg("data", 0, 0))
    assert G.receive_precedence(FAR, s, Action("corrupt"), hurt)


# --- configurations and the command line --------------------------------------------------------------------


def test_configurations() -> None:
    assert datagram_config("mixed").locations == 3 and G.neighbor(datagram_config("mixed"), 1, 0)
    assert not G.neighbor(datagram_config("far"), 0, 1) and G.neighbor(datagram_config("far"), 1, 1)
    assert make_model("datagram", "far", 4).cfg.locations == 4  # type: ignore[attr-defined]
    assert isinstance(make_model("datagram"), DatagramModel)
    with pytest.raises(ValueError):
        datagram_config("nope")


def test_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["datagram", "--depth", "4"]) == 0
    out = capsys.readouterr().out
    assert "model: datagram  config: far  locations: 2" in out and out.rstrip().endswith("no violation")
    assert main(["datagram", "--mutant", "receive-reorders"]) == 1
    out = capsys.readouterr().out
    assert "violation of FifoPerChannel" in out and "counterexample (5 steps)" in out
