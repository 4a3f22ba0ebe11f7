"""Differential tests: the runtime's snapshot cores in lockstep with the snapshot model of ``verify/snapshots.py``.

The model (:class:`pytimely.verify.snapshots.SnapshotModel`) follows keyed state in bins through joins and leaves,
snapshots at epoch boundaries, commits, and restarts on any number of workers. Each step here takes one action
the model allows and does it with the runtime's own pieces, the ones :mod:`pytimely.recovery.runtime` runs:

* a worker's state is a :class:`~pytimely.dataflow.state.KeyedState`: a record is a write, a bin shipped is
  ``extract``, a bin installed is written in, a restore is ``restore``;
* the fence rule is the runtime's ``may_change_at``, checked at every apply, ship and install the model allows;
* when a worker snapshots, and where its fence goes, is the runtime's ``passed_fences`` (it must agree with the
  model's ``capture_plan``); what it reports is ``binned_changes`` (only the bins that changed, plus a rotating
  share of the others, or the whole state as one piece), not the model's full report, each piece encoded and
  decoded by the runtime's codec;
* a commit is the runtime's ``merge`` of those reports into the manifest before; a restart restores bin ``b`` on
  ``owner_on_restore(b, k)``.

After every step both agree on where every bin is and what it holds, and on every committed snapshot's counts;
the model's invariants (``SnapshotExact`` first) hold throughout.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pytimely.dataflow.bins import binner
from pytimely.dataflow.state import KeyedState
from pytimely.dataflow.subgraph import may_change_at
from pytimely.recovery import Manifest, SnapshotPolicy, merge
from pytimely.recovery.codec import decode, encode
from pytimely.recovery.parts import Part
from pytimely.recovery.runtime import binned_changes, owner_on_restore, passed_fences
from pytimely.verify import snapshots as S
from pytimely.verify.snapshots import IN_FLIGHT, SnapshotConfig, SnapshotModel, SnapState
from tests.profiles import examples

KEY = "0/sums#0/totals"
CONFIG = SnapshotConfig(
    bins=4,
    epochs=5,
    records=frozenset({(0, 0), (1, 0), (2, 1), (3, 1), (0, 2), (1, 3), (2, 3), (3, 4), (0, 4)}),
    clears=frozenset({(1, 2), (2, 4)}),
    workers=3,
    members=2,
    every=1,
    max_joins=1,
    max_leaves=1,
    max_restarts=2,
)
REWRITE_EVERY = 2
"""Small, so that the rotating rewrite of unchanged bins comes up within a run."""


def _tracked(bins: int) -> KeyedState[int, int]:
    """A keyed state noting its changes, as the runtime makes it when recovery is on."""
    state: KeyedState[int, int] = KeyedState(bins)
    state.track()
    return state


def _keys(bins: int) -> list[int]:
    """One key per bin (the runtime routes and snapshots by ``binner``)."""
    find = binner(bins)
    found: dict[int, int] = {}
    k = 0
    while len(found) < bins:
        found.setdefault(find(k), k)
        k += 1
    return [found[b] for b in range(bins)]


class SnapshotLockstep(RuleBasedStateMachine):
    """The runtime's cores and the snapshot model, action for action."""

    cfg = CONFIG

    def __init__(self) -> None:
        super().__init__()
        cfg = self.cfg
        self.model = SnapshotModel(cfg)
        self.s: SnapState = next(iter(self.model.initial_states()))
        self.policy = SnapshotPolicy(every_epochs=cfg.every)
        self.keys = _keys(cfg.bins)
        self.states: list[KeyedState[int, int]] = [_tracked(cfg.bins) for _ in range(cfg.workers)]
        self.flight: dict[int, dict[int, int]] = {}
        self.taken = [0] * cfg.workers
        self.pending: dict[int, list[Part]] = {}
        self.files: dict[str, Any] = {}
        self.manifest: Manifest | None = None
        self.peers = cfg.members

    # -- the runtime's side of each action -----------------------------------------------------

    def fence(self, w: int) -> int | None:
        return self.s.fence[w]

    def do(self, name: str, args: dict[str, Any], before: SnapState, after: SnapState) -> None:
        cfg = self.cfg
        if name == "apply":
            b, e = args["b"], args["epoch"]
            w = before.holder[b]
            state, key = self.states[w], self.keys[b]
            if cfg.changes(b, e):
                assert may_change_at(before.fence[w], e), ("apply beyond the fence", w, e)
            if (b, e) in cfg.clears and key in state:
                del state[key]
            if (b, e) in cfg.records:
                state[key] = state.get(key, 0) + 1
        elif name == "ship":
            b = args["b"]
            w = before.holder[b]
            (move,) = [m for m in after.flight if m[0] == b]
            assert may_change_at(before.fence[w], move[1]), ("ship beyond the fence", w, move)
            self.flight[b] = self.states[w].extract({b})
        elif name == "install":
            b = args["b"]
            to = after.holder[b]
            (move,) = [m for m in before.flight if m[0] == b]
            assert may_change_at(before.fence[to], move[1]), ("install beyond the fence", to, move)
            self.states[to].update(self.flight.pop(b))
        elif name == "capture":
            self.capture(args["w"], before, after)
        elif name == "commit":
            epoch = args["epoch"]
            self.manifest = merge(self.manifest, epoch, self.pending.pop(epoch), "id", self.peers)
        elif name == "join":
            n = args["n"]
            assert after.fence[n] == self.policy.first_at_or_after(before.released)
        elif name == "restart":
            self.restart(args["k"], after)

    def capture(self, w: int, before: SnapState, after: SnapState) -> None:
        fence = before.fence[w]
        assert fence is not None
        captures, next_fence = passed_fences(fence, S.snap_lows(before, self.cfg), self.policy, before.stop[w])
        assert [e for e, _ in captures] == [fence], (captures, fence)
        assert next_fence == after.fence[w], (next_fence, after.fence[w])
        turn = self.taken[w] % REWRITE_EVERY
        self.taken[w] += 1
        pieces = binned_changes(self.states[w], turn, REWRITE_EVERY)
        name = f"f{len(self.files)}"
        self.files[name] = [decode(encode(v)) for _, v in pieces]  # as written (the codec), not as it goes on
        part = Part(w, 0, fence, files=[(name, 1, "sha")])
        if pieces:
            part.binned[KEY] = {b: None if v is None else (name, i, 1) for i, (bins, v) in enumerate(pieces)
                                for b in bins}  # fmt: skip
        self.pending.setdefault(fence, []).append(part)

    def restored(self, peers: int) -> list[KeyedState[int, int]]:
        """Fresh states restored from the committed manifest on ``peers`` workers, piece by piece as the runtime."""
        assert self.manifest is not None
        states: list[KeyedState[int, int]] = [_tracked(self.cfg.bins) for _ in range(self.cfg.workers)]
        by_piece: dict[tuple[int, int, int], list[int]] = {}
        for b, piece in self.manifest.binned.get(KEY, {}).items():
            by_piece.setdefault(piece, []).append(b)
        for (i, off, _), bins in by_piece.items():
            value = self.files[self.manifest.files[i][0]][off]
            for w in range(peers):
                mine = [b for b in bins if owner_on_restore(b, peers) == w]
                if mine:
                    states[w].restore_piece(mine, value)
        return states

    def committed_counts(self) -> list[int]:
        states = self.restored(self.peers)
        return [sum(s.get(self.keys[b], 0) for s in states) for b in range(self.cfg.bins)]

    def restart(self, k: int, after: SnapState) -> None:
        cfg = self.cfg
        self.states = [_tracked(cfg.bins) for _ in range(cfg.workers)]
        self.flight.clear()
        self.pending.clear()
        self.taken = [0] * cfg.workers
        self.peers = k
        if self.manifest is not None:
            self.states = self.restored(k)

    # -- one step --------------------------------------------------------------------------

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        choices = [(a, s2) for a, s2 in self.model.successors(self.s) if a.name != "restart"]
        if not choices:
            return
        action, after = data.draw(st.sampled_from(choices), label="action")
        self.do(action.name, dict(action.args), self.s, after)
        self.s = after

    @precondition(lambda self: self.s.committed is not None and self.s.restarts < self.cfg.max_restarts)
    @rule(k=st.integers(1, 3))
    def crash_and_restart(self, k: int) -> None:
        """Everything but the committed snapshot is lost; the run starts again on ``k`` workers."""
        assert S.restart_enabled(self.cfg, self.s, k)
        after = S.restart(self.cfg, self.s, k)
        self.do("restart", {"k": k}, self.s, after)
        self.s = after

    # -- agreement -------------------------------------------------------------------------

    @invariant()
    def bins_agree(self) -> None:
        s = self.s
        for b, key in enumerate(self.keys):
            holders = [w for w, state in enumerate(self.states) if key in state]
            if s.holder[b] == IN_FLIGHT:
                assert holders == [] and self.flight[b].get(key, 0) == s.counts[b]
            elif s.counts[b]:
                assert holders == [s.holder[b]], (b, holders, s.holder[b])
                assert self.states[s.holder[b]][key] == s.counts[b]
            else:
                assert holders == []

    @invariant()
    def commits_agree(self) -> None:
        committed = self.s.committed
        assert (committed is None) == (self.manifest is None)
        if committed is not None and self.manifest is not None:
            assert self.manifest.epoch == committed[0]
            assert self.committed_counts() == list(committed[1])

    @invariant()
    def model_invariants_hold(self) -> None:
        for inv in self.model.invariants():
            assert inv.holds(self.s), inv.name


TestSnapshotLockstep = SnapshotLockstep.TestCase
TestSnapshotLockstep.settings = settings(max_examples=examples(60), stateful_step_count=50, deadline=None)


class EverySecondEpoch(SnapshotLockstep):
    """Snapshots every second epoch: fences jump over epochs, and a leaver's last fence comes before it leaves."""

    cfg = SnapshotConfig(
        bins=3, epochs=6, records=frozenset({(0, 0), (1, 1), (2, 2), (0, 3), (1, 4), (2, 5)}),
        clears=frozenset({(0, 2), (1, 5)}), workers=3,
        members=2, every=2, max_joins=1, max_leaves=1, max_restarts=1,
    )  # fmt: skip


TestEverySecondEpoch = EverySecondEpoch.TestCase
TestEverySecondEpoch.settings = settings(max_examples=examples(30), stateful_step_count=50, deadline=None)
