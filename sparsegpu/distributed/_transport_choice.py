"""Which transport a distributed matrix uses: what each rank can do, chosen by all ranks.

``auto`` (the default; ``transport=`` or ``SPARSEGPU_TRANSPORT`` choose another) takes the
first of nccl, cuda-aware-mpi, host (:mod:`._transport`) that works on every rank; the
choice is made by all ranks together from what each one reports, so they always agree.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import socket

import numpy as np

from ..device import _cuda
from . import _comm
from ._transport import _DEVICE, HostStaged, Local, _nccl_module

ENV_TRANSPORT = "SPARSEGPU_TRANSPORT"
TRANSPORTS = ("auto", "nccl", "cuda-aware-mpi", "host")


def resolve_name(transport) -> str:
    """``transport``, else ``SPARSEGPU_TRANSPORT``, else ``"auto"``; checked."""
    source = "transport"
    if transport is None:
        transport, source = os.environ.get(ENV_TRANSPORT, "auto"), ENV_TRANSPORT
    if transport not in TRANSPORTS:
        raise ValueError(
            f"{source} must be one of {', '.join(map(repr, TRANSPORTS))}, got {transport!r}"
        )
    return transport


def cuda_aware_mpi() -> tuple[bool, str]:
    """Whether the MPI library under mpi4py takes device buffers, and how that was read:
    MPI 4.1's memory-allocation kinds (``cuda:device``), else Open MPI's
    ``MPIX_Query_cuda_support``; unknown reads as no."""
    MPI = _comm.mpi()
    try:
        info = MPI.COMM_WORLD.Get_info()
        try:
            kinds = info.Get("mpi_memory_alloc_kinds") or ""
        finally:
            info.Free()
        if "cuda" in kinds:
            return True, f"the MPI library lists memory kinds {kinds!r}"
    except Exception:  # noqa: S110 - an MPI before 4.1: try the extension below
        pass
    query = None
    for library in (None, getattr(MPI, "__file__", None)):
        try:
            query = getattr(ctypes.CDLL(library), "MPIX_Query_cuda_support", None)
        except OSError:
            continue
        if query is not None:
            break
    if query is not None:
        query.restype = ctypes.c_int
        if query():
            return True, "MPIX_Query_cuda_support() says 1"
        return False, "MPIX_Query_cuda_support() says 0"
    return False, f"{MPI.Get_library_version().splitlines()[0].strip()} does not say it is"


def _key(text: str) -> int:
    """A 63-bit number naming ``text`` (host names, GPU bus ids) in an int64 table."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


# the per-rank record choose() allgathers
_ON_DEVICE, _NCCL, _CUDA_AWARE, _NODE, _GPU = range(5)


def _record(xp) -> tuple[np.ndarray, dict]:
    """This rank's capabilities (int64 record) and their reasons."""
    record = np.zeros(5, dtype=np.int64)
    reasons = {}
    cupy = _cuda.cupy_or_none()
    record[_NODE] = _key(socket.gethostname())
    if xp is np or cupy is None:
        return record, reasons
    record[_ON_DEVICE] = 1
    record[_GPU] = _key(cupy.cuda.Device().pci_bus_id)
    nccl, why = _nccl_module()
    record[_NCCL] = nccl is not None
    reasons["nccl"] = why
    aware, how = cuda_aware_mpi()
    record[_CUDA_AWARE] = aware
    reasons["cuda-aware-mpi"] = how
    return record, reasons


def _missing(table, column) -> list[int]:
    return [r for r in range(len(table)) if not table[r, column]]


def _shared_gpus(table) -> list[list[int]]:
    """Groups of ranks on one GPU (same node, same bus id)."""
    groups = {}
    for rank, row in enumerate(table):
        groups.setdefault((int(row[_NODE]), int(row[_GPU])), []).append(rank)
    return [ranks for ranks in groups.values() if len(ranks) > 1]


def _refusals(table, reasons) -> dict[str, str | None]:
    """Why each device transport cannot run on these ranks (None: it can)."""
    off = _missing(table, _ON_DEVICE)
    if off:
        why = f"vectors live on the host on rank(s) {off}"
        return {"nccl": why, "cuda-aware-mpi": why}
    refusals = {"nccl": None, "cuda-aware-mpi": None}
    no_nccl, shared = _missing(table, _NCCL), _shared_gpus(table)
    if no_nccl:
        refusals["nccl"] = f"no NCCL on rank(s) {no_nccl}" + (
            f" ({reasons['nccl']})" if reasons.get("nccl") else ""
        )
    elif shared:
        refusals["nccl"] = (
            f"ranks {' and '.join(map(str, shared[0]))} share one GPU (NCCL needs one GPU a rank)"
        )
    unaware = _missing(table, _CUDA_AWARE)
    if unaware:
        refusals["cuda-aware-mpi"] = (
            f"MPI is not CUDA-aware on rank(s) {unaware} ({reasons.get('cuda-aware-mpi')})"
        )
    return refusals


def choose(ctx, xp, requested: str):
    """The transport of a new matrix (collective, within the deadline): ``requested`` or,
    for ``auto``, the first of nccl, cuda-aware-mpi, host that works on every rank.

    Raises ValueError on every rank when a transport that was asked for cannot run (why).
    """
    if ctx.size == 1:
        return Local(ctx, xp)
    record, reasons = _record(xp)
    table = np.empty((ctx.size, record.size), dtype=np.int64)
    ctx.wait([ctx.comm.Iallgather(record, table)], "choosing the transport")
    refusals = _refusals(table, reasons)
    if requested in refusals and refusals[requested] is not None:
        raise ValueError(
            f"transport {requested!r} cannot run here: {refusals[requested]}; use "
            f"transport='auto' (or unset {ENV_TRANSPORT}) to take the best that can"
        )
    if requested == "host":
        return HostStaged(ctx, xp, f"asked for ({_asked()})")
    if requested != "auto":
        return _DEVICE[requested](ctx, xp, f"asked for ({_asked()})")
    skipped = []
    for name in ("nccl", "cuda-aware-mpi"):
        if refusals[name] is None:
            why = "auto: " + ("; ".join(skipped) + "; " if skipped else "")
            try:
                return _DEVICE[name](ctx, xp, why + _DEVICE[name].works)
            except _comm.RankError as exc:  # raised alike on every rank: all go on
                refusals[name] = f"setting it up failed ({exc})"
        skipped.append(f"not {name}: {refusals[name]}")
    return HostStaged(ctx, xp, "auto: " + "; ".join(skipped))


def _asked() -> str:
    return (
        f"{ENV_TRANSPORT}={os.environ[ENV_TRANSPORT]}"
        if ENV_TRANSPORT in os.environ
        else "transport="
    )
