"""Errors of moving bytes between processes (frames, handshakes, peers, flow control) and of a cluster's
membership (joins, leaves, requests to the launcher)."""

from __future__ import annotations

from pytimely.errors.base import PytimelyError


class MembershipError(PytimelyError):
    """A process cannot join or leave the running computation as asked."""


class CommunicationError(PytimelyError):
    """Exchanging messages with another process failed; the computation stops."""

    def __init__(self, message: str, peer: int | None = None) -> None:
        super().__init__(message)
        self.peer = peer


class FrameError(CommunicationError):
    """A frame received from a peer is malformed; names the peer and, when known, the channel."""

    def __init__(self, message: str, peer: int | None, channel: tuple[int, int] | None) -> None:
        super().__init__(message, peer)
        self.channel = channel


class ChecksumError(FrameError):
    """A frame's checksum does not match its bytes: it was corrupted in transit."""


class FrameFormatError(FrameError):
    """Bytes that are not a frame of this protocol version (bad magic, version or precedence)."""


class FrameLengthError(FrameError):
    """A frame announces a payload longer than the frame limit."""


class RingError(FrameError):
    """A peer's shared-memory ring offer, descriptor or release is not one this process accepts."""

    def __init__(self, message: str, peer: int | None = None) -> None:
        super().__init__(message, peer, None)


class FrameSequenceError(FrameError):
    """A frame's sequence number is not the next one: a frame was lost, duplicated or reordered."""

    def __init__(
        self, message: str, peer: int | None, channel: tuple[int, int] | None, expected: int, received: int
    ) -> None:
        super().__init__(message, peer, channel)
        self.expected = expected
        self.received = received


class UnknownChannelError(FrameError):
    """A frame names a channel the receiving worker does not have (the processes run different programs)."""


class PayloadError(FrameError):
    """A checked frame's payload could not be decoded."""


class AuthenticationError(CommunicationError):
    """A peer did not prove it knows the cluster secret, or refused this process's proof."""


class PeerFailedError(CommunicationError):
    """Another process died, stalled, or stopped with an error; names the process."""


class JoinTimeoutError(MembershipError):
    """A process asked to join did not join within its deadline (or exited first); names the process."""

    def __init__(self, message: str, process: int | None) -> None:
        super().__init__(message)
        self.process = process


class LeaveTimeoutError(MembershipError):
    """A process that is leaving did not finish within its deadline; names the process."""

    def __init__(self, message: str, process: int | None) -> None:
        super().__init__(message)
        self.process = process


class RequestTimeoutError(MembershipError):
    """A request to the launcher's control endpoint got no answer within its deadline."""


class FrameAuthenticationError(ChecksumError):
    """A frame's header or payload fails authentication under its connection's key: corrupted, forged or spliced."""


class HandshakeTimeoutError(AuthenticationError):
    """A connecting peer did not complete the handshake within its deadline (silent, trickling or stalled)."""


class SendTimeoutError(PeerFailedError):
    """A peer took no data for longer than the failure timeout while frames waited for it; names the peer."""


class FlowControlError(CommunicationError):
    """Processes sending to each other filled every window and none can read more: one step's output is too big."""
