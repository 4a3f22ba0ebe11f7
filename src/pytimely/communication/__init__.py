"""Moving messages between workers: the allocator seam and its in-process implementation."""

from pytimely.communication.allocator import Allocator, Pull, Push
from pytimely.communication.local import LocalAllocator

__all__ = ["Allocator", "LocalAllocator", "Pull", "Push"]
