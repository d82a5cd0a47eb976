"""Blocks of solver iterations captured once as a CUDA graph and replayed.

An iteration of a Krylov solver on a system of 0.1-8M nonzeros is a dozen launches of a
few microseconds of GPU work each; on the H200 the host's launch latency dominates (a CG
iteration 75-78 us on 24k-65k rows, each of its operations 16-25 us between events,
issue 15). Captured, a block of iterations is one launch: a CG-like step on 65k rows took
174 us plain and 31.5 us replayed.

What a captured step may do: launch kernels on the current stream into buffers made before
the capture (``plan.matvec(x, out=y)``, cuBLAS dots into 0-d device arrays, elementwise
kernels reading scalars from device memory). It may not allocate (CuPy's pool could hand
the graph's memory to someone else) or read anything back to the host. A capture that
fails says why, and the solver goes on without graphs.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager

from ..device import _cuda

_streams = threading.local()


def _solver_stream(cupy):
    """This thread's capture stream on the current device, made once: plans keep scratch
    per stream (the merge-path carries, cuSPARSE workspaces), so a new stream per solve
    would leave new scratch behind every solve."""
    streams = _streams.__dict__.setdefault("by_device", {})
    device = cupy.cuda.Device().id
    if device not in streams:
        streams[device] = cupy.cuda.Stream(non_blocking=True)
    return streams[device]


@contextmanager
def private_stream():
    """This thread's capture stream (non-blocking), ordered after the caller's stream (so
    it sees b and x0) and made current; the caller's stream waits for it on exit."""
    cupy = _cuda.cupy_or_none()
    caller = cupy.cuda.get_current_stream()
    stream = _solver_stream(cupy)
    stream.wait_event(caller.record())
    try:
        with stream:
            yield stream
    finally:
        caller.wait_event(stream.record())


class Block:
    """``step()`` run ``size`` times, captured on ``stream`` as one graph.

    Attributes
    ----------
    size : int
    failure : str or None
        Why the capture failed (then ``launch`` must not be called).
    """

    def __init__(self, step, size: int, stream):
        self.size = size
        self.stream = stream
        self.failure = None
        self._graph = None
        # no collection while capturing: a finalizer that synchronises or frees device
        # memory would invalidate the capture
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._capture(step, size, stream)
        finally:
            if collecting:
                gc.enable()

    def _capture(self, step, size: int, stream) -> None:
        try:
            stream.begin_capture()
        except Exception as exc:  # a driver or CuPy without stream capture
            self.failure = f"stream capture unavailable: {exc}"
            return
        try:
            for _ in range(size):
                step()
        except Exception as exc:  # an allocation or a host read inside the step
            self.failure = f"capture failed ({type(exc).__name__}: {exc})"
        try:
            graph = stream.end_capture()
        except Exception as exc:
            self.failure = self.failure or f"capture failed at its end ({exc})"
            return
        if self.failure is None:
            self._graph = graph

    def launch(self) -> None:
        """Run the block's iterations (asynchronously, on the capture stream)."""
        self._graph.launch(self.stream)
