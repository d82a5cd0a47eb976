"""A few integers a kernel hands the host through pinned memory, read after an event.

A kernel that reduces to a few integers (a product's count of intermediate products, a
matrix's row statistics) gathers its blocks' shares in device *scratch* words, and its last
block writes the answer into pinned host memory (which the device reaches through unified
addressing) and leaves the scratch as it found it. The host records an event after the
launch and reads the words once the event is done: one wait, no device-to-host copy
launched after the kernel, no upload of starting values before it. (Where a product's host
waits for such a read, the copy, the upload and their allocations cost more than the kernel:
a fresh operand's row statistics took about 100 us that way on the H200, the kernel itself
a tenth of it.)

A :class:`HostWords` slot (scratch, host words, event) is kept per thread, device and kind,
and reused by the next read of its kind: making one (a pinned allocation, an event, an
upload) costs more than the read.
"""

from __future__ import annotations

import threading

import numpy as np

# a thread's free slots: (kind, device) -> [HostWords]
_pools = threading.local()


def device_address(cupy, host_address: int) -> int:
    """Pinned host memory's address as kernels reach it: with unified addressing (every
    64-bit platform CUDA supports) the host address itself, which is what
    ``cudaPointerGetAttributes`` answers."""
    try:
        return cupy.cuda.runtime.pointerGetAttributes(host_address).devicePointer or host_address
    except (AttributeError, cupy.cuda.runtime.CUDARuntimeError):
        return host_address


def free_slots(kind: str, device: int) -> list:
    """This thread's free slots of ``kind`` on ``device``."""
    return _pools.__dict__.setdefault("free", {}).setdefault((kind, device), [])


class HostWords:
    """Scratch words on the device (starting as ``scratch``; the kernel leaves them so),
    ``host_words`` pinned host words of the scratch's dtype that the kernel writes, and the
    event recorded after it. Subclasses name their ``KIND`` and how many free slots a
    thread keeps (``KEEP``: more are made while that many are out)."""

    __slots__ = ("device", "scratch", "host", "host_on_device", "event")
    KIND = "words"
    KEEP = 4

    def __init__(self, cupy, device: int, scratch: np.ndarray, host_words: int):
        import cupyx

        self.device = device
        self.scratch = cupy.asarray(scratch)
        self.host = cupyx.empty_pinned(host_words, dtype=scratch.dtype)
        self.host_on_device = device_address(cupy, self.host.ctypes.data)
        self.event = cupy.cuda.Event(disable_timing=True)

    @classmethod
    def take(cls, cupy):
        """A free slot of this kind on the current device, or a new one."""
        device = cupy.cuda.runtime.getDevice()
        free = free_slots(cls.KIND, device)
        return free.pop() if free else cls(cupy, device)

    def give_back(self) -> None:
        """Free again (its kernel has finished: its scratch is as it found it)."""
        free = free_slots(self.KIND, self.device)
        if len(free) < self.KEEP:
            free.append(self)

    def settle(self) -> None:
        """Given back once its kernel has finished (a read dropped before it was made)."""
        try:
            self.event.synchronize()
        except Exception:  # noqa: BLE001 - its context went first: nothing to give back to
            return
        self.give_back()

    def collect(self) -> np.ndarray:
        """The host words once the kernel before :attr:`event` has written them (a copy),
        the slot given back."""
        self.event.synchronize()
        words = self.host.copy()
        self.give_back()
        return words

    def read(self, stream) -> np.ndarray:
        """:meth:`collect` of the kernel just launched on ``stream``."""
        self.event.record(stream)
        return self.collect()
