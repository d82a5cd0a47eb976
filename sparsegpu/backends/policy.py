"""The base of every launch policy and its validation helpers.

A policy is plain data (CUB's tuning-as-data): one frozen dataclass per kernel family,
every knob one documented field, validated on construction. Each family's policy lives
beside its kernel, in its backend module (``CsrVectorPolicy`` in
:mod:`sparsegpu.backends.csr_vector`, ...); :mod:`sparsegpu.tuning` re-exports them. Where
a policy comes from (tuning cache, shipped defaults, occupancy) is recorded in ``source``,
which takes no part in equality, so a tuned and a default policy with the same knobs share
a compiled plan.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields

THREADS_PER_ROW_CHOICES = (1, 2, 4, 8, 16, 32)
UNROLL_CHOICES = (1, 2, 4, 8)
MAX_BLOCK_SIZE = 1024
WARP_SIZE = 32


def as_int(owner, name: str, value) -> int:
    """``value`` as a plain int (numpy integers accepted, bools and floats refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    # frozen dataclass: normalize numpy integers so knobs() is plain JSON
    object.__setattr__(owner, name, value)
    return value


def check_int_choice(owner, name: str, choices) -> None:
    value = as_int(owner, name, getattr(owner, name))
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of {list(choices)}")


def check_bool(owner, name: str) -> None:
    value = getattr(owner, name)
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")


def check_block_size(owner) -> None:
    block_size = as_int(owner, "block_size", owner.block_size)
    if block_size < WARP_SIZE or block_size > MAX_BLOCK_SIZE or block_size % WARP_SIZE:
        raise ValueError(
            f"block_size={block_size} is not allowed; use a multiple of {WARP_SIZE} "
            f"between {WARP_SIZE} and {MAX_BLOCK_SIZE}"
        )


def format_knobs(knobs: Mapping) -> str:
    """``block_size=128 threads_per_row=8`` for tables; knobs that are None or False (off,
    or left to the compiler) are left out."""
    return " ".join(f"{k}={v}" for k, v in knobs.items() if v is not None and v is not False)


# field metadata of knobs that tables leave out while they hold their default
SECONDARY = {"secondary": True}


@dataclass(frozen=True)
class Policy:
    """Base of every policy; ``source`` says where the numbers came from."""

    source: str = field(default="explicit", compare=False, kw_only=True)

    def __post_init__(self):
        if not isinstance(self.source, str):
            raise TypeError(f"source must be a str, got {type(self.source).__name__}")

    @classmethod
    def knob_names(cls) -> tuple[str, ...]:
        """The names of the tuning knobs (every field but ``source``), in field order."""
        return tuple(f.name for f in fields(cls) if f.name != "source")

    def knobs(self) -> dict:
        """The tuning knobs as a dict (``source`` left out), e.g. for JSON."""
        out = asdict(self)
        out.pop("source")
        return out

    def shown_knobs(self) -> dict:
        """:meth:`knobs` less the secondary ones still at their default (for tables)."""
        hidden = {
            f.name
            for f in fields(self)
            if f.metadata.get("secondary") and getattr(self, f.name) == f.default
        }
        return {k: v for k, v in self.knobs().items() if k not in hidden}

    @classmethod
    def grid(cls, **choices) -> list:
        """Candidate policies, one per combination of the knobs' ``choices`` (name ->
        values; the last knob varies fastest), every other knob at its default."""
        names = list(choices)
        return [
            cls(**dict(zip(names, values, strict=True)), source="candidate")
            for values in itertools.product(*choices.values())
        ]

    @classmethod
    def from_knobs(cls, knobs: Mapping, source: str = "explicit"):
        """Build from :meth:`knobs` output; unknown keys are an error, missing ones default.

        Raises
        ------
        TypeError
            When ``knobs`` is not a mapping or a knob has the wrong type.
        ValueError
            For an unknown knob name or a value out of range.
        """
        if not isinstance(knobs, Mapping):
            raise TypeError(
                f"{cls.__name__}.from_knobs takes a dict of knobs, got {type(knobs).__name__}"
            )
        names = set(cls.knob_names())
        unknown = set(knobs) - names
        if unknown:
            raise ValueError(
                f"{cls.__name__} has no field(s) {sorted(map(str, unknown))}; "
                f"its fields are {sorted(names)}"
            )
        return cls(**knobs, source=source)


@dataclass(frozen=True)
class RowGroupPolicy(Policy):
    """Knobs of every kernel that gives each row a group of threads (``csr_vector``, ``swcache``).

    Attributes
    ----------
    block_size : int
        Threads per block, a multiple of 32 up to 1024.
    threads_per_row : int
        Threads cooperating on one row (1..32, a power of two; CUSP-style sub-warps).
    max_registers : int or None
        Register cap per thread given to the compiler (``--maxrregcount``), 16..255; None
        leaves the choice to the compiler. No single cap is best for every matrix on the
        H200 (the 27-point stencil wants 40, the 5-point one the compiler's 32), so the
        autotuner sweeps it.
    """

    block_size: int = 256
    threads_per_row: int = 32
    max_registers: int | None = None

    def __post_init__(self):
        super().__post_init__()
        check_int_choice(self, "threads_per_row", THREADS_PER_ROW_CHOICES)
        check_block_size(self)
        cap = self.max_registers
        if cap is not None:
            if (
                isinstance(cap, bool)
                or not isinstance(cap, numbers.Integral)
                or not 16 <= cap <= 255
            ):
                raise ValueError(
                    f"max_registers={cap!r} is not allowed; use None or an int in 16..255"
                )
            object.__setattr__(self, "max_registers", int(cap))

    def compile_options(self) -> tuple[str, ...]:
        """NVRTC options this policy adds to its kernel's compilation."""
        if self.max_registers is None:
            return ()
        return (f"--maxrregcount={self.max_registers}",)


@dataclass(frozen=True)
class UnrolledRowPolicy(RowGroupPolicy):
    """Knobs of the row-group kernels that read a row in unrolled trips (``csr_vector``,
    ``delta16``): :class:`RowGroupPolicy`'s, plus how each trip loads.

    Attributes
    ----------
    block_size, threads_per_row, max_registers
        As in :class:`RowGroupPolicy`.
    unroll : int
        Independent (index, value, x) loads each thread keeps in flight per trip through a
        row (1, 2, 4 or 8). More hides more latency on long or scattered rows, at the price
        of registers and of predicated-off loads on short rows.
    stream_matrix : bool
        Read the matrix's values and indices with evict-first (``__ldcs``) loads, so that
        the streamed matrix does not push x out of L1 and L2.
    vector_loads : bool
        Read values and column indices as quads of 4 entries with 8- and 16-byte loads
        (each lane takes whole aligned quads, skipping entries of the neighbouring rows;
        ``unroll`` then counts quads per trip): a quarter of the load instructions and
        fewer L1 wavefronts for rows of a few dozen entries, where the scalar loads of 4
        sub-warp groups touch 4 misaligned segments each.

    All three are compile-time macros of the kernels (``SPARSEGPU_UNROLL``,
    ``SPARSEGPU_STREAM_MATRIX``, ``SPARSEGPU_VECTOR_LOADS``); a policy that changes them
    compiles its own variant (once, memoized).
    """

    unroll: int = field(default=4, metadata=SECONDARY)
    stream_matrix: bool = field(default=False, metadata=SECONDARY)
    vector_loads: bool = field(default=False, metadata=SECONDARY)

    def __post_init__(self):
        super().__post_init__()
        check_int_choice(self, "unroll", UNROLL_CHOICES)
        check_bool(self, "stream_matrix")
        check_bool(self, "vector_loads")

    def compile_options(self) -> tuple[str, ...]:
        """NVRTC options this policy adds to its kernel's compilation."""
        options = super().compile_options()
        if self.unroll != 4:
            options += (f"-DSPARSEGPU_UNROLL={self.unroll}",)
        if self.stream_matrix:
            options += ("-DSPARSEGPU_STREAM_MATRIX=1",)
        if self.vector_loads:
            options += ("-DSPARSEGPU_VECTOR_LOADS=1",)
        return options
