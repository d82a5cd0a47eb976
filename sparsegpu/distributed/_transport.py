"""How halo entries and reductions travel between the ranks: one class per method.

=================  ==========================================================================
``nccl``           CuPy's NCCL: halos (grouped ``ncclSend``/``ncclRecv``) and reductions
                   (``ncclAllReduce``) device to device, queued on streams and ordered by
                   CUDA events, never waited for by the host; a CUDA graph can hold them.
``cuda-aware-mpi`` MPI on device buffers (no host copies), where the MPI library says it is
                   CUDA-aware; the host waits for each message (with the deadline).
``host``           pinned host buffers and any MPI: the fallback (and NumPy vectors).
``local``          one rank: nothing to exchange, nothing to reduce.
=================  ==========================================================================

Which one a matrix uses is chosen by all ranks together (:mod:`._transport_choice`); the
halo's elementwise kernels are :mod:`._halo_kernels`.
"""

from __future__ import annotations

import os
import pickle
import warnings

import numpy as np

from ..device import _cuda
from . import _comm
from ._comm import HALO_TAG
from ._halo_kernels import gather

# NCCL's multicast (NVLink SHARP) serves large collectives; ours are a few scalars, and its
# multicast objects can take a shared machine's GPUs out of service: off unless asked for.
NVLS_VARIABLE = "NCCL_NVLS_ENABLE"


def _nccl_module():
    """(cupy.cuda.nccl, None) or (None, why not)."""
    try:
        from cupy.cuda import nccl
    except Exception as exc:  # ImportError, or the library failing to load
        return None, f"CuPy has no NCCL here ({type(exc).__name__}: {exc})"
    if not getattr(nccl, "available", True):
        return None, "CuPy was built without NCCL"
    return nccl, None


def nccl_version() -> str:
    nccl, _ = _nccl_module()
    code = nccl.get_version()
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


# ---------------------------------------------------------------------- transports
class Transport:
    """How one matrix's halos and reductions travel (made once per matrix).

    Attributes
    ----------
    name : str
    reason : str
        Why this one (what ``explain()`` prints).
    on_device : bool
        Halos and reductions take device arrays without host copies.
    capturable : bool
        Products and reductions can be captured into a CUDA graph (nothing waits on
        the host).
    """

    name = ""
    on_device = False
    capturable = False

    def __init__(self, ctx, xp, reason: str):
        self.ctx, self.xp, self.reason = ctx, xp, reason

    def halo(self, plan, dtype):
        """The exchange of ``plan``'s entries of ``dtype`` (buffers made once)."""
        raise NotImplementedError

    def allreduce(self, buffer) -> None:
        """Sum ``buffer`` (a contiguous array where the vectors live) over the ranks, in
        place; on the current stream for device transports."""
        raise NotImplementedError

    def warm_up(self, plan) -> None:
        """Set up the connections a product will use (NCCL makes them lazily)."""


class Local(Transport):
    """One rank: nothing to exchange, nothing to reduce."""

    name = "local"
    capturable = True

    def __init__(self, ctx, xp):
        super().__init__(ctx, xp, "one rank: nothing to exchange or reduce")
        self.on_device = xp is not np

    def halo(self, plan, dtype):
        return _NoHalo(self.xp, dtype)

    def allreduce(self, buffer) -> None:
        return None


class _NoHalo:
    def __init__(self, xp, dtype):
        self.ghosts = xp.zeros(0, dtype=dtype)
        self.returned = xp.zeros(0, dtype=dtype)
        self.pack = xp.zeros(0, dtype=np.int64)

    def start(self, x_local):
        return None

    def finish(self):
        return self.ghosts

    def start_reverse(self, contributions):
        return None

    def finish_reverse(self):
        return self.returned


def _bounds(parts) -> np.ndarray:
    return np.concatenate(([0], np.cumsum([p.size for p in parts]))).astype(np.int64)


class _Halo:
    """Buffers and message lists of one plan and dtype, shared by the transports.

    Forward (a product): ``x_local[pack]`` goes to ``send_ranks``, ghosts come from
    ``recv_ranks``. Reverse (a transposed product): each ghost's contribution goes back to
    its owner, which adds them up at ``pack``.
    """

    def __init__(self, transport, plan, dtype, host_buffers: bool):
        xp = transport.xp
        self.transport, self.plan, self.dtype = transport, plan, np.dtype(dtype)
        self.ctx = transport.ctx
        packed = np.concatenate(plan.send_indices) if plan.send_indices else np.zeros(0)
        packed = packed.astype(np.int64)
        self.send_bounds = _bounds(plan.send_indices)
        self.pack = xp.asarray(packed)
        n_send = int(packed.size)
        self.packed = xp.empty(n_send, dtype=self.dtype)  # gathered x / returned sums
        self.ghosts = xp.empty(plan.n_ghost, dtype=self.dtype)
        if host_buffers and xp is not np:
            import cupyx

            self.send_host = cupyx.empty_pinned(n_send, dtype=self.dtype)
            self.recv_host = cupyx.empty_pinned(plan.n_ghost, dtype=self.dtype)
        elif host_buffers:
            self.send_host, self.recv_host = self.packed, self.ghosts

    def forward_lists(self, send, recv):
        """(sends, receives) as (buffer slice, peer) lists for a product."""
        plan = self.plan
        sends = [(send[self.send_bounds[k] : self.send_bounds[k + 1]], dest)
                 for k, dest in enumerate(plan.send_ranks)]  # fmt: skip
        receives = [(recv[plan.recv_bounds[k] : plan.recv_bounds[k + 1]], source)
                    for k, source in enumerate(plan.recv_ranks)]  # fmt: skip
        return sends, receives

    def reverse_lists(self, packed, ghosts):
        """(sends, receives) for a transposed product: the ghost slices go back to their
        owners, which receive them where a product sends from."""
        forward_sends, forward_receives = self.forward_lists(packed, ghosts)
        return forward_receives, forward_sends


class HostStaged(Transport):
    """Halos through host memory (pinned for CuPy vectors) and any MPI; reductions by
    MPI on the host. Works everywhere; the host waits for every message."""

    name = "host"

    def halo(self, plan, dtype):
        return _HostHalo(self, plan, dtype)

    def allreduce(self, buffer) -> None:
        if isinstance(buffer, np.ndarray):
            buffer[...] = self.ctx.allreduce(np.ascontiguousarray(buffer), "a reduction")
            return
        host = self.ctx.allreduce(buffer.get(), "a reduction")
        buffer.set(host)


class _HostHalo(_Halo):
    def __init__(self, transport, plan, dtype):
        super().__init__(transport, plan, dtype, host_buffers=True)
        self._requests, self._peers = [], []

    def _post(self, sends, receives):
        comm = self.ctx.comm
        for buffer, source in receives:
            self._requests.append(comm.Irecv(buffer, source=source, tag=HALO_TAG))
            self._peers.append(source)
        for buffer, dest in sends:
            self._requests.append(comm.Isend(buffer, dest=dest, tag=HALO_TAG))
            self._peers.append(dest)

    def _wait(self, what):
        requests, peers = self._requests, self._peers
        self._requests, self._peers = [], []
        self.ctx.wait(requests, what, peers)

    def start(self, x_local):
        """Pack and post; a packing error is returned after zeros were sent in its place."""
        error = None
        try:
            if self.send_host.size:
                gather(x_local, self.pack, self.packed)
                if self.packed is not self.send_host:
                    self.packed.get(out=self.send_host)  # waits for the gather
        except Exception as exc:
            error = exc
            self.send_host[...] = 0
        self._post(*self.forward_lists(self.send_host, self.recv_host))
        return error

    def _arrived(self, what, device, host):
        """Wait for the messages of ``what``, then copy ``host`` (where they arrived) into
        ``device``, unless the two are one buffer."""
        self._wait(what)
        if device is not host and device.size:
            device.set(host)
        return device

    def finish(self):
        return self._arrived("halo exchange", self.ghosts, self.recv_host)

    def start_reverse(self, contributions):
        if isinstance(contributions, np.ndarray):
            self.recv_host[...] = contributions
        elif contributions.size:
            contributions.get(out=self.recv_host)
        self._post(*self.reverse_lists(self.send_host, self.recv_host))
        return None

    def finish_reverse(self):
        return self._arrived("transposed halo exchange", self.packed, self.send_host)


class CudaAwareMpi(Transport):
    """MPI on device buffers: no host copies; the host waits for the gathered entries,
    then for each message (with the deadline)."""

    name = "cuda-aware-mpi"
    on_device = True
    works = "the MPI library takes device buffers: halos and reductions skip host copies"

    def halo(self, plan, dtype):
        return _MpiDeviceHalo(self, plan, dtype)

    def allreduce(self, buffer) -> None:
        cupy = _cuda.cupy_or_none()
        self.ctx.wait_device(cupy.cuda.get_current_stream(), "a reduction")
        flat = buffer.reshape(-1)
        request = self.ctx.comm.Iallreduce(_comm.mpi().IN_PLACE, flat)
        self.ctx.wait([request], "a reduction")


class _MpiDeviceHalo(_HostHalo):
    def __init__(self, transport, plan, dtype):
        _Halo.__init__(self, transport, plan, dtype, host_buffers=False)
        self._requests, self._peers = [], []
        self.send_host, self.recv_host = self.packed, self.ghosts  # device buffers to MPI

    def start(self, x_local):
        error = None
        try:
            gather(x_local, self.pack, self.packed)
        except Exception as exc:
            error = exc
            self.packed[...] = 0
        cupy = _cuda.cupy_or_none()
        self.ctx.wait_device(cupy.cuda.get_current_stream(), "packing the halo")
        self._post(*self.forward_lists(self.packed, self.ghosts))
        return error

    def start_reverse(self, contributions):
        cupy = _cuda.cupy_or_none()
        if contributions is not self.ghosts:
            self.ghosts[...] = contributions
        self.ctx.wait_device(cupy.cuda.get_current_stream(), "packing the halo")
        self._post(*self.reverse_lists(self.packed, self.ghosts))
        return None


def _nccl_type(nccl, dtype: np.dtype) -> tuple[int, int]:
    """(NCCL datatype, elements per value) for a reduction in ``dtype`` (complex values are
    pairs of reals)."""
    real = np.dtype(dtype.char.lower()) if dtype.kind == "c" else dtype
    types = {
        "float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64, "float16": nccl.NCCL_FLOAT16,
        "int32": nccl.NCCL_INT32, "int64": nccl.NCCL_INT64, "uint8": nccl.NCCL_UINT8,
    }  # fmt: skip
    if real.name not in types:
        raise TypeError(f"NCCL cannot reduce {dtype} values; use float32 or float64")
    return types[real.name], 2 if dtype.kind == "c" else 1


class _Channel:
    """A NCCL communicator and the stream its exchanges run on, shared by the matrices of
    one group of ranks (making one costs hundreds of milliseconds, and every NCCL call of
    theirs is ordered through the caller's stream, so they never run at once)."""

    def __init__(self, comm, stream):
        self.comm, self.stream = comm, stream
        self.alive = True

    def abort(self) -> None:
        """End NCCL's traffic at once (a failed rank left kernels waiting). Every rank of
        the node must abort too, or this waits for them (NCCL >= 2.16)."""
        if self.alive:
            self.alive = False
            self.comm.abort()

    def set_aside(self, streams) -> bool:
        """After a timeout: if work of this channel may still be queued (one of ``streams``,
        where its calls were queued, is not done), take it out of use without aborting it
        (an abort would wait for the rank that never came), so that no later matrix's
        messages pair with that work; the next matrix of the group makes a new one. True
        when set aside."""
        if self.alive and not all(stream.done for stream in streams):
            self.alive = False
            return True
        return False


_CHANNELS = {}  # (world ranks of the group, device) -> _Channel


def _end_capture(stream) -> None:
    """End the CUDA graph capture in progress on ``stream``, if any (a solve captures its
    iterations, and a rank's failure can come within them), dropping what it captured.

    NCCL cannot abort a communicator whose calls a capture holds: ``ncclCommAbort`` waited
    for them for good on every rank (2 x H200, NCCL 2.28). The capture's own end then
    finds none in progress, and the solve reports its capture as failed and goes on to
    the error."""
    try:
        if stream.is_capturing():
            stream.end_capture()
    except Exception:  # noqa: S110 - the abort that follows is what matters
        pass


def _members(ctx) -> tuple:
    MPI = _comm.mpi()
    world, group = MPI.COMM_WORLD.Get_group(), ctx.comm.Get_group()
    try:
        ranks = MPI.Group.Translate_ranks(group, list(range(ctx.size)), world)
    finally:
        group.Free()
        world.Free()
    return tuple(int(r) for r in ranks), _cuda.cupy_or_none().cuda.Device().id


def _channel(ctx, nccl) -> _Channel:
    """This group's channel (collective): the one made before if every rank still has it,
    else a new one, its unique id made on rank 0 and broadcast over MPI (an error making
    it is raised on every rank, as a RankError)."""
    key = _members(ctx)
    channel = _CHANNELS.get(key)
    usable = np.array([int(channel is not None and channel.alive)], dtype=np.int64)
    if ctx.allreduce(usable, "setting up NCCL", op=_comm.mpi().MIN)[0]:
        return channel
    os.environ.setdefault(NVLS_VARIABLE, "0")
    payload, error = np.zeros(_UNIQUE_BYTES, dtype=np.uint8), None
    if ctx.rank == 0:
        try:
            data = pickle.dumps(nccl.get_unique_id())
            payload[:8] = np.frombuffer(np.int64(len(data)).tobytes(), dtype=np.uint8)
            payload[8 : 8 + len(data)] = np.frombuffer(data, dtype=np.uint8)
        except Exception as exc:
            error = exc
    ctx.share(error, 0, "setting up NCCL (its unique id)")
    ctx.wait([ctx.comm.Ibcast(payload, root=0)], "setting up NCCL")
    length = int(np.frombuffer(payload[:8].tobytes(), dtype=np.int64)[0])
    unique = pickle.loads(payload[8 : 8 + length].tobytes())
    error = comm = None
    try:
        comm = nccl.NcclCommunicator(ctx.size, unique, ctx.rank)
    except Exception as exc:
        error = exc
    ctx.agree(error, "setting up NCCL (its communicator)")
    channel = _CHANNELS[key] = _Channel(comm, _exchange_stream())
    return channel


def _exchange_stream():
    """A non-blocking stream of the device's highest priority (priorities out of range
    are clamped to it), kept for the process: its work is scheduled ahead of the local
    product's blocks as they finish, so the halo does not wait for the whole product."""
    cupy = _cuda.cupy_or_none()
    runtime = cupy.cuda.runtime
    handle = runtime.streamCreateWithPriority(runtime.streamNonBlocking, _HIGHEST_PRIORITY)
    with warnings.catch_warnings():
        # CuPy 14 deprecates ExternalStream for Stream.from_external, which CuPy 13
        # lack; the stream lives as long as the process
        warnings.simplefilter("ignore", DeprecationWarning)
        return cupy.cuda.ExternalStream(handle, cupy.cuda.Device().id)


# lower is higher; CUDA clamps it to the device's range (-5..0 on recent GPUs)
_HIGHEST_PRIORITY = -(2**20)


# bytes of the broadcast carrying NCCL's pickled unique id (128 characters)
_UNIQUE_BYTES = 2048


class Nccl(Transport):
    """CuPy's NCCL on one GPU a rank: halos and reductions never leave the devices.

    The communicator's unique id is broadcast over MPI; its initialisation runs once all
    ranks agreed on it (NCCL's own initialisation is the one wait without our deadline:
    every rank is known to be there when it starts), and matrices of the same ranks share
    it. Connections to every neighbour are made at construction (``warm_up``); a
    product's exchange runs on a stream of its own, after an event on the caller's stream,
    and the caller's stream waits for its end through another event: no host
    synchronisation anywhere.
    """

    name = "nccl"
    on_device = True
    capturable = True
    works = "CuPy's NCCL on every rank, one GPU each: halos and reductions device to device"

    def __init__(self, ctx, xp, reason):
        nccl, _ = _nccl_module()
        super().__init__(ctx, xp, f"{reason} (NCCL {nccl_version()})")
        self.nccl = nccl
        self.channel = _channel(ctx, nccl)
        self.comm, self.stream = self.channel.comm, self.channel.stream
        ctx.on_failure(self.abort)

    def abort(self, error: BaseException | None = None) -> None:
        """The context failed with ``error``: after an error every rank gets (RankError),
        end NCCL's traffic at once and drop the channel (the next matrix makes one); after
        a timeout, set the channel aside only if its work may still be queued
        (:meth:`_Channel.set_aside`), never aborting it."""
        cupy = _cuda.cupy_or_none()
        current = cupy.cuda.get_current_stream()
        if isinstance(error, TimeoutError):
            self.channel.set_aside((self.stream, current))
            return
        _end_capture(current)
        self.channel.abort()

    def halo(self, plan, dtype):
        return _NcclHalo(self, plan, dtype)

    def allreduce(self, buffer) -> None:
        cupy = _cuda.cupy_or_none()
        datatype, per_value = _nccl_type(self.nccl, buffer.dtype)
        pointer = buffer.data.ptr
        self.comm.allReduce(pointer, pointer, buffer.size * per_value, datatype,
                            self.nccl.NCCL_SUM, cupy.cuda.get_current_stream().ptr)  # fmt: skip

    def exchange(self, sends, receives, stream) -> None:
        """One NCCL group of byte-wise sends and receives on ``stream``; each message a
        (device pointer, bytes, peer) triple."""
        nccl, comm, handle = self.nccl, self.comm, stream.ptr
        nccl.groupStart()
        try:
            for pointer, size, source in receives:
                comm.recv(pointer, size, nccl.NCCL_UINT8, source, handle)
            for pointer, size, dest in sends:
                comm.send(pointer, size, nccl.NCCL_UINT8, dest, handle)
        finally:
            nccl.groupEnd()

    def warm_up(self, plan) -> None:
        cupy = _cuda.cupy_or_none()
        neighbours = plan.neighbours
        out = cupy.zeros(len(neighbours) + 1, dtype=np.uint8)
        sends = _messages([(out[-1:], peer) for peer in neighbours])
        receives = _messages([(out[k : k + 1], peer) for k, peer in enumerate(neighbours)])
        stream = cupy.cuda.get_current_stream()
        self.exchange(sends, receives, stream)
        self.allreduce(cupy.zeros(1, dtype=np.float64))
        self.ctx.wait_device(stream, "setting up NCCL's connections",
                             f" (with rank(s) {neighbours})")  # fmt: skip


def _messages(pairs) -> list[tuple[int, int, int]]:
    """(device pointer, bytes, peer) of each (buffer, peer) pair: what NCCL is handed."""
    return [(buffer.data.ptr, buffer.nbytes, peer) for buffer, peer in pairs]


class _NcclHalo(_Halo):
    """The exchange on the channel's stream (of the highest priority, so that its kernels
    take the first free multiprocessors while the local product runs). ``start`` gathers
    the entries to send there; ``finish``, called once the local product is queued, starts
    the group of sends and receives (NCCL's calls take host time the product no longer
    waits for) and has the caller's stream wait for it. The message lists are made once:
    the buffers never move."""

    def __init__(self, transport, plan, dtype):
        super().__init__(transport, plan, dtype, host_buffers=False)
        cupy = _cuda.cupy_or_none()
        self.ready = cupy.cuda.Event(disable_timing=True)
        self.received = cupy.cuda.Event(disable_timing=True)
        sends, receives = self.forward_lists(self.packed, self.ghosts)
        self.forward = _messages(sends), _messages(receives)
        self.reverse = self.forward[1], self.forward[0]
        self._pending = None

    def _pack(self, lists, prepare):
        """Queue ``prepare`` on the exchange's stream after the caller's work so far."""
        cupy = _cuda.cupy_or_none()
        stream = self.transport.stream
        self.ready.record(cupy.cuda.get_current_stream())
        stream.wait_event(self.ready)
        error = None
        with stream:
            try:
                prepare()
            except Exception as exc:
                error = exc
                self.packed.fill(0)
                self.ghosts.fill(0)
        self._pending = lists
        return error

    def _send(self):
        lists, self._pending = self._pending, None
        stream = self.transport.stream
        self.transport.exchange(*lists, stream)
        self.received.record(stream)

    def start(self, x_local):
        return self._pack(self.forward, lambda: gather(x_local, self.pack, self.packed))

    def finish(self):
        self._send()
        _cuda.cupy_or_none().cuda.get_current_stream().wait_event(self.received)
        return self.ghosts

    def start_reverse(self, contributions):
        def prepare():
            if contributions is not self.ghosts:
                self.ghosts[...] = contributions

        return self._pack(self.reverse, prepare)

    def finish_reverse(self):
        self.finish()
        return self.packed


_DEVICE = {"nccl": Nccl, "cuda-aware-mpi": CudaAwareMpi}
