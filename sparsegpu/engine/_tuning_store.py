"""The store of tuned entries (the tuning cache): the autotuner's winners per device, on disk.

Plain data below selection: :mod:`sparsegpu.engine._select` reads it (a store is passed in), the
autotuner (:mod:`sparsegpu.tuning.autotune`) writes it; it imports neither.

Where
    ``tuning.json`` in ``$SPARSEGPU_CACHE_DIR`` if set, else in the user cache directory
    (``platformdirs.user_cache_dir("sparsegpu")``).
Keyed by
    a :class:`TuningContext`: the device (name, compute capability, SM count), the CUDA
    runtime and driver versions, the sparsegpu version and a hash of the kernel sources.
    Any change to one of them makes earlier numbers inapplicable, so they are simply not
    found (they stay in the file for the setup that made them).
Entries
    one :class:`TunedEntry` per backend, value dtype, index dtype and row-length class
    (:func:`sparsegpu.engine._rules.row_class`), each carrying the time and GB/s
    it was chosen for (CUB style: a tuned number carries its score).
Safety
    Writes go to a temporary file in the same directory and are renamed over the cache
    (``os.replace``) under a file lock, after merging with what is on disk, so two
    processes tuning at once lose nothing. A corrupt file or one of an older format version
    is reported with a :class:`TuningCacheWarning`, renamed aside (never deleted) and
    rebuilt; it is never fatal. A file of a newer format version (a newer sparsegpu's) is
    left alone: reported once, read as empty and never written over.
Lookup order
    user cache, then the defaults shipped in ``sparsegpu/engine/tuning_defaults.json`` (keyed
    by architecture, e.g. ``"sm_90"``), then the backend's untuned policy.

The document (``schema`` 1)::

    {"format": "sparsegpu-tuning-cache", "schema": 1,
     "contexts": {"<context digest>": {"context": {...}, "entries": [{...}, ...]}}}
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import importlib.resources
import json
import math
import os
import platform
import threading
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from .._files import ENV_CACHE_DIR, cache_dir, create_beside
from .._version import __version__
from ..backends import ALIASES, POLICY_ALIASES
from ..device import _cuda
from ..device._dtypes import lacks_dtype

CACHE_FORMAT = "sparsegpu-tuning-cache"
DEFAULTS_FORMAT = "sparsegpu-tuning-defaults"
SCHEMA_VERSION = 1
CACHE_FILE = "tuning.json"
DEFAULTS_FILE = "tuning_defaults.json"
LOCK_TIMEOUT_S = 60.0

ROW_CLASSES = ("short", "medium", "long", "irregular", "scattered")


class TuningCacheWarning(UserWarning):
    """The tuning cache had a problem that sparsegpu worked around (the message says how)."""


class TuningCacheError(RuntimeError):
    """The tuning cache could not be written (lock timeout, unwritable directory)."""


class _BadDocument(ValueError):
    """A cache document that cannot be used; ``kind`` is ``corrupt``, ``foreign`` (an older
    or unknown format version: set aside and rebuilt) or ``newer`` (left alone, read-only)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


# ---------------------------------------------------------------------------- key
@dataclass(frozen=True)
class TuningContext:
    """Everything a tuned number depends on besides the matrix.

    Attributes
    ----------
    device : str
        Device name (``"NVIDIA H200"``; ``"host x86_64"`` for host backends).
    compute_capability : str
        ``"9.0"``; ``"host"`` for host backends.
    multiprocessors : int
        SM count (CPU count for host backends).
    cuda_runtime, cuda_driver : str
        CUDA versions (``"-"`` for host backends).
    sparsegpu : str
        The sparsegpu version.
    kernel_sources : str
        SHA-256 of the files in ``sparsegpu/kernels`` (:func:`kernel_sources_digest`).
    """

    device: str
    compute_capability: str
    multiprocessors: int
    cuda_runtime: str
    cuda_driver: str
    sparsegpu: str
    kernel_sources: str

    @property
    def digest(self) -> str:
        """A short stable hash of all the fields: the key of this context in the file."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def arch(self) -> str:
        """``"sm_90"`` for compute capability 9.0 (the key of the shipped defaults)."""
        if self.compute_capability == "host":
            return "host"
        return "sm_" + self.compute_capability.replace(".", "")

    @classmethod
    def from_json(cls, raw) -> TuningContext:
        return cls(**_checked_fields(cls, raw, "context"))


def kernel_sources_digest(root=None) -> str:
    """SHA-256 over the names and bytes of every file under ``root``.

    ``root`` defaults to the package's kernel directory (``sparsegpu/kernels``, read
    with importlib.resources); a missing directory hashes as empty. Byte-code caches are
    left out, so the digest only changes when a source changes.
    """
    if root is None:
        return _package_kernel_digest()
    digest = hashlib.sha256()
    for relative, data in sorted(_walk(root, "")):
        digest.update(relative.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return digest.hexdigest()


@functools.cache
def _package_kernel_digest() -> str:
    from ..device._compile import kernel_dir

    try:
        root = kernel_dir()
    except ModuleNotFoundError:  # no kernels in this installation: nothing to hash
        return kernel_sources_digest(_EmptyDir())
    return kernel_sources_digest(root)


class _EmptyDir:
    def iterdir(self):
        return iter(())


def _walk(directory, prefix: str):
    if isinstance(directory, (str, os.PathLike)):
        directory = Path(directory)
    for child in directory.iterdir():
        name = child.name
        if name == "__pycache__" or name.endswith((".pyc", ".pyo")):
            continue
        if child.is_dir():
            yield from _walk(child, f"{prefix}{name}/")
        else:
            yield f"{prefix}{name}", child.read_bytes()


def host_context() -> TuningContext:
    """The context of host (NumPy-resident) backends: this machine's CPU."""
    return TuningContext(
        device=f"host {platform.machine() or 'cpu'}",
        compute_capability="host",
        multiprocessors=os.cpu_count() or 1,
        cuda_runtime="-",
        cuda_driver="-",
        sparsegpu=__version__,
        kernel_sources=kernel_sources_digest(),
    )


@functools.cache
def _device_context(index: int) -> TuningContext:
    info = _cuda.device_info(index)
    versions = _cuda.versions()
    return TuningContext(
        device=info.name,
        compute_capability="{}.{}".format(*info.compute_capability),
        multiprocessors=info.multiprocessors,
        cuda_runtime=versions["cuda_runtime"],
        cuda_driver=versions["cuda_driver"],
        sparsegpu=__version__,
        kernel_sources=kernel_sources_digest(),
    )


def current_context(residence) -> TuningContext | None:
    """The context of a backend whose mirrors live in ``residence``, on the current device.

    Host residences get :func:`host_context`; CuPy residences the current CUDA device;
    None when that device is not usable here.
    """
    xp = residence.get_xp()
    if xp is None:
        return None
    if xp is np:
        return host_context()
    return _device_context(xp.cuda.Device().id)


# -------------------------------------------------------------------------- entries
@dataclass(frozen=True)
class TunedEntry:
    """One autotuner winner: a backend's best policy for one kind of product.

    Attributes
    ----------
    backend : str
    value_dtype, index_dtype : str
        ``"float64"``, ``"int32"``, ...
    row_class : str
        ``"short"``, ``"medium"``, ``"long"`` or ``"irregular"``.
    policy_type : str
        The policy class name (``"CsrVectorPolicy"``).
    knobs : dict
        :meth:`~sparsegpu.backends.policy.Policy.knobs` of the winner.
    time_ms, gb_per_s : float
        Median time and bandwidth of the winner on the matrix it was tuned on.
    untuned_time_ms : float or None
        The untuned default's time on the same matrix (None when it was not measured).
    matrix : str
        What it was tuned on (name, shape, nonzeros).
    tuned_at : str
        UTC time, ISO 8601.
    origin : str
        ``"tuned"`` (user cache) or ``"shipped"`` (package defaults); not stored.
    """

    backend: str
    value_dtype: str
    index_dtype: str
    row_class: str
    policy_type: str
    knobs: dict
    time_ms: float
    gb_per_s: float
    untuned_time_ms: float | None
    matrix: str
    tuned_at: str
    origin: str = field(default="tuned", compare=False)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.backend, self.value_dtype, self.index_dtype, self.row_class)

    @property
    def gain(self) -> float | None:
        """Untuned time over tuned time (None when the untuned time is unknown)."""
        if self.untuned_time_ms is None or self.time_ms <= 0:
            return None
        return self.untuned_time_ms / self.time_ms

    def to_json(self) -> dict:
        out = asdict(self)
        out.pop("origin")
        return out

    @classmethod
    def from_json(cls, raw, origin: str = "tuned") -> TunedEntry:
        values = _checked_fields(cls, raw, "entry", skip={"origin"})
        # entries written under a former backend name load under the current one
        values["backend"] = ALIASES.get(values["backend"], values["backend"])
        values["policy_type"] = POLICY_ALIASES.get(values["policy_type"], values["policy_type"])
        if values["row_class"] not in ROW_CLASSES:
            raise ValueError(f"entry row_class {values['row_class']!r} is not one of {ROW_CLASSES}")
        for dtype_field in ("value_dtype", "index_dtype"):
            np.dtype(values[dtype_field])  # raises TypeError on a name numpy does not know
        return cls(**values, origin=origin)

    def policy(self, policy_type: type):
        """The policy this entry describes, as ``policy_type`` (source = ``origin``).

        Raises
        ------
        TypeError, ValueError
            When the entry names another policy class or its knobs are not valid for it.
        """
        if policy_type.__name__ != self.policy_type:
            raise TypeError(
                f"the entry holds a {self.policy_type} but backend {self.backend!r} takes "
                f"a {policy_type.__name__}"
            )
        return policy_type.from_knobs(self.knobs, source=self.origin)


_FIELD_TYPES = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "float | None": (int, float, type(None)),
    "dict": (dict,),
}


def _checked_fields(cls, raw, what: str, skip=frozenset()) -> dict:
    """The fields of dataclass ``cls`` from a JSON object, each type-checked."""
    if not isinstance(raw, dict):
        raise TypeError(f"a cache {what} must be a JSON object, got {type(raw).__name__}")
    out = {}
    for f in fields(cls):
        if f.name in skip:
            continue
        if f.name not in raw:
            raise ValueError(f"a cache {what} lacks the field {f.name!r}")
        value = raw[f.name]
        allowed = _FIELD_TYPES[f.type]
        if isinstance(value, bool) or not isinstance(value, allowed):
            raise TypeError(f"cache {what} field {f.name!r} is {value!r}, expected {f.type}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"cache {what} field {f.name!r} is {value!r}, expected finite")
        out[f.name] = value
    return out


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


# ------------------------------------------------------------------------- documents
def _parse_cache(text: str) -> dict[str, tuple[TuningContext, dict]]:
    """{digest: (context, {key: entry})} from a cache file's text, or _BadDocument."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise _BadDocument("corrupt", f"not valid JSON ({exc})") from None
    except RecursionError:
        raise _BadDocument("corrupt", "not a tuning cache (JSON nested too deeply)") from None
    if not isinstance(raw, dict) or raw.get("format") != CACHE_FORMAT:
        raise _BadDocument("corrupt", f"not a sparsegpu tuning cache (no format {CACHE_FORMAT!r})")
    schema = raw.get("schema")
    if isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA_VERSION:
        raise _BadDocument(
            "newer",
            f"written by a newer sparsegpu (cache format version {schema}; this one reads "
            f"version {SCHEMA_VERSION})",
        )
    if schema != SCHEMA_VERSION:
        raise _BadDocument(
            "foreign",
            f"written in cache format version {raw.get('schema')!r}; this sparsegpu "
            f"reads version {SCHEMA_VERSION}",
        )
    contexts = raw.get("contexts")
    if not isinstance(contexts, dict):
        raise _BadDocument("corrupt", "its 'contexts' is not a JSON object")
    out = {}
    try:
        for digest, record in contexts.items():
            if not isinstance(record, dict) or not isinstance(record.get("entries"), list):
                raise ValueError(f"context {digest!r} has no list of entries")
            context = TuningContext.from_json(record.get("context"))
            if context.digest != digest:
                raise ValueError(f"context {digest!r} does not match its own fields")
            out[digest] = (context, _entries(record["entries"]))
    except (TypeError, ValueError) as exc:
        raise _BadDocument("corrupt", f"malformed ({exc})") from None
    return out


def _render_cache(contexts: dict[str, tuple[TuningContext, dict]]) -> str:
    doc = {
        "format": CACHE_FORMAT,
        "schema": SCHEMA_VERSION,
        "contexts": {
            digest: {
                "context": asdict(context),
                "entries": [entries[k].to_json() for k in sorted(entries)],
            }
            for digest, (context, entries) in sorted(contexts.items())
        },
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def _parse_defaults(text: str) -> dict[str, dict]:
    """{arch: {key: entry}} from the shipped defaults' text (ValueError when malformed)."""
    raw = json.loads(text)
    if not isinstance(raw, dict) or raw.get("format") != DEFAULTS_FORMAT:
        raise ValueError(f"not a sparsegpu defaults file (no format {DEFAULTS_FORMAT!r})")
    if raw.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"schema {raw.get('schema')!r}, expected {SCHEMA_VERSION}")
    devices = raw.get("devices")
    if not isinstance(devices, dict):
        raise ValueError("its 'devices' is not a JSON object")
    out = {}
    for arch, items in devices.items():
        if not isinstance(items, list):
            raise ValueError(f"devices[{arch!r}] is not a list of entries")
        out[arch] = _entries(items, origin="shipped")
    return out


def _entries(items: list, origin: str = "tuned") -> dict:
    """``{key: entry}`` from a JSON list of entries (TypeError or ValueError when one is
    malformed). Entries for a dtype this installation lacks (bfloat16 without ml_dtypes)
    are skipped, not fatal: they apply where ml_dtypes is installed."""
    entries = {}
    for item in items:
        if isinstance(item, dict) and lacks_dtype(item.get("value_dtype")):
            continue
        entry = TunedEntry.from_json(item, origin=origin)
        entries[entry.key] = entry
    return entries


# ----------------------------------------------------------------- reading, memoized
_memo_lock = threading.Lock()
_read_memo: dict[str, tuple[tuple, dict]] = {}
_defaults_memo: dict[str, dict] = {}
_file_locks: dict[str, tuple] = {}


def _signature(st: os.stat_result) -> tuple:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


@contextlib.contextmanager
def _file_lock(path: Path):
    """Hold the cache's lock: a thread lock within this process, a file lock across processes.

    The thread lock comes first because older filelock versions share one lock count
    among the threads of a process.
    """
    import filelock

    key = str(path)
    with _memo_lock:
        pair = _file_locks.get(key)
        if pair is None:
            pair = (threading.RLock(), filelock.FileLock(key, timeout=LOCK_TIMEOUT_S))
            _file_locks[key] = pair
    thread_lock, file_lock = pair
    if not thread_lock.acquire(timeout=LOCK_TIMEOUT_S):
        raise filelock.Timeout(key)
    try:
        with file_lock:
            yield
    finally:
        thread_lock.release()


class TuningCache:
    """The tuning cache file in one directory, and the shipped defaults behind it.

    Parameters
    ----------
    directory : str or os.PathLike, optional
        Where ``tuning.json`` lives; default :func:`cache_dir`.
    defaults : str or os.PathLike, optional
        A defaults file to use instead of the one shipped with the package (tests).

    Examples
    --------
    >>> from sparsegpu.tuning import TuningCache
    >>> cache = TuningCache("/tmp/sparsegpu-doc-cache")
    >>> cache.path.name
    'tuning.json'
    """

    def __init__(self, directory=None, *, defaults=None):
        if directory is None:
            try:
                directory = cache_dir()
            except RuntimeError as exc:  # no platformdirs and no SPARSEGPU_CACHE_DIR
                raise TuningCacheError(str(exc)) from None
        self.directory = Path(directory).expanduser()
        self.path = self.directory / CACHE_FILE
        self.lock_path = self.directory / "tuning.lock"
        self._defaults = Path(defaults) if defaults is not None else None

    def __repr__(self) -> str:
        return f"TuningCache({str(self.directory)!r})"

    # ------------------------------------------------------------------- reading
    def contexts(self) -> dict[str, tuple[TuningContext, dict]]:
        """Everything in the user cache: ``{digest: (context, {key: entry})}``.

        A corrupt or older-version file is set aside with a warning and reads as empty; a
        newer-version file reads as empty too, with one warning, and stays where it is.
        """
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return {}
        signature = _signature(st)
        key = str(self.path)
        with _memo_lock:
            hit = _read_memo.get(key)
        if hit is not None and hit[0] == signature:
            return hit[1]
        text = self.path.read_text(encoding="utf-8", errors="replace")
        try:
            parsed = _parse_cache(text)
        except _BadDocument as bad:
            if bad.kind != "newer":
                self._set_aside(bad, signature)
                return {}
            warnings.warn(
                f"the tuning cache {self.path} was {bad}; it is left as it is and not "
                "used (the shipped defaults apply), and this sparsegpu saves no tuning "
                f"results over it: upgrade sparsegpu, or set {ENV_CACHE_DIR} to another "
                "directory",
                TuningCacheWarning,
                stacklevel=2,
            )
            parsed = {}  # remembered below, so the warning comes once per file version
        with _memo_lock:
            _read_memo[key] = (signature, parsed)
        return parsed

    def entries(self) -> list[tuple[TuningContext, TunedEntry]]:
        """Every user-cache entry with its context (for ``sparsegpu autotune --show``)."""
        return [
            (context, entry)
            for context, entries in self.contexts().values()
            for entry in entries.values()
        ]

    def shipped(self) -> dict[str, dict]:
        """The shipped defaults: ``{arch: {key: entry}}`` (empty, with a warning, if unusable)."""
        source = str(self._defaults) if self._defaults is not None else "<package>"
        with _memo_lock:
            hit = _defaults_memo.get(source)
        if hit is not None:
            return hit
        try:
            if self._defaults is not None:
                text = self._defaults.read_text(encoding="utf-8")
            else:
                text = (importlib.resources.files("sparsegpu.engine") / DEFAULTS_FILE).read_text(
                    encoding="utf-8"
                )
            parsed = _parse_defaults(text)
        except (OSError, TypeError, ValueError) as exc:
            warnings.warn(
                f"the shipped tuning defaults ({source}) are unusable and were ignored: {exc}",
                TuningCacheWarning,
                stacklevel=2,
            )
            parsed = {}
        with _memo_lock:
            _defaults_memo[source] = parsed
        return parsed

    def lookup(self, context: TuningContext, backend: str, value_dtype, index_dtype, row_class):
        """The entry for this product: user cache first, then the shipped defaults, or None."""
        key = (backend, str(np.dtype(value_dtype)), str(np.dtype(index_dtype)), row_class)
        record = self.contexts().get(context.digest)
        if record is not None and key in record[1]:
            return record[1][key]
        return self.shipped().get(context.arch, {}).get(key)

    # ------------------------------------------------------------------- writing
    def record(self, context: TuningContext, entries) -> Path:
        """Merge ``entries`` into the file under the lock and write it atomically.

        An entry replaces the one with the same backend, dtypes and row class in this
        context; everything else on disk (written by other processes too) is kept.

        Raises
        ------
        TuningCacheError
            When the lock cannot be taken in time, the directory is not writable, or the
            file there was written by a newer sparsegpu (it is never overwritten).
        """
        import filelock

        entries = list(entries)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with _file_lock(self.lock_path):
                contexts = dict(self._read_locked())
                known = dict(contexts[context.digest][1]) if context.digest in contexts else {}
                known.update((e.key, e) for e in entries)
                contexts[context.digest] = (context, known)
                self._write_locked(_render_cache(contexts))
        except filelock.Timeout:
            raise TuningCacheError(
                f"could not lock {self.lock_path} within {LOCK_TIMEOUT_S:.0f} s (another "
                "sparsegpu process holds it); the tuning results were not saved"
            ) from None
        except _BadDocument as bad:  # only a newer file gets here; it is never overwritten
            raise TuningCacheError(
                f"the tuning cache {self.path} was {bad}; the tuning results were not saved "
                f"over it: upgrade sparsegpu, or set {ENV_CACHE_DIR} to another directory"
            ) from None
        except OSError as exc:
            raise TuningCacheError(
                f"could not write the tuning cache in {self.directory}: {exc}; set "
                f"{ENV_CACHE_DIR} to a writable directory"
            ) from None
        return self.path

    def clear(self) -> bool:
        """Delete the cache file (an explicit user request); True if there was one."""
        if not self.path.exists():
            return False
        with _file_lock(self.lock_path):
            try:
                self.path.unlink()
            except FileNotFoundError:
                return False
        return True

    def _read_locked(self) -> dict:
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return {}
        try:
            return _parse_cache(text)
        except _BadDocument as bad:
            if bad.kind == "newer":
                raise
            self._move_aside(bad)
            return {}

    def _write_locked(self, text: str) -> None:
        # imported here: sparsegpu.io imports the matrix classes, which import this module

        fd, tmp = create_beside(self.directory, f".{CACHE_FILE}.", ".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _set_aside(self, bad: _BadDocument, signature: tuple) -> None:
        """Move a bad file aside under the lock, unless another process already did."""
        import filelock

        try:
            with _file_lock(self.lock_path):
                try:
                    if _signature(os.stat(self.path)) != signature:
                        return  # rewritten meanwhile: not the file we judged
                except FileNotFoundError:
                    return
                self._move_aside(bad)
        except (filelock.Timeout, OSError) as exc:
            warnings.warn(
                f"the tuning cache {self.path} is {bad} and could not be set aside ({exc}); "
                "it is ignored for now",
                TuningCacheWarning,
                stacklevel=3,
            )

    def _move_aside(self, bad: _BadDocument) -> None:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
        target = self.path.with_name(f"{CACHE_FILE}.{bad.kind}-{stamp}-{os.getpid()}")
        os.replace(self.path, target)
        warnings.warn(
            f"the tuning cache {self.path} is {bad}; moved it to {target} (nothing was "
            "deleted) and starting a new cache",
            TuningCacheWarning,
            stacklevel=4,
        )


def default_cache() -> TuningCache:
    """The cache in :func:`cache_dir` (re-evaluated, so the environment variable applies)."""
    return TuningCache()
