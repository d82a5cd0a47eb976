"""Where sparsegpu keeps files, and how it creates them.

:func:`cache_dir` is the one cache directory (the tuning cache, the device probe and the
SuiteSparse downloads live under it). Files are made beside their destination, with the
permissions of ``open``:

:func:`tempfile.mkstemp` creates files readable by their owner only (0600) whatever the
umask; a file renamed into place from one keeps that mode, so a matrix written or cached
by one user could not be read by another. :func:`create_beside` creates the temporary
file with mode ``0o666 & ~umask``, as ``open(path, "w")`` and scipy do.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

_ATTEMPTS = 100
ENV_CACHE_DIR = "SPARSEGPU_CACHE_DIR"


def cache_dir() -> Path:
    """sparsegpu's cache directory: ``$SPARSEGPU_CACHE_DIR``, else the user cache directory.

    Raises
    ------
    RuntimeError
        When the variable is unset and platformdirs is not installed (it is a dependency;
        a trimmed environment may lack it).
    """
    override = os.environ.get(ENV_CACHE_DIR)
    if override:
        return Path(override).expanduser()
    try:
        import platformdirs
    except ImportError as exc:
        raise RuntimeError(
            f"platformdirs is not installed ({exc}); pip install platformdirs, or set "
            f"{ENV_CACHE_DIR} to the directory sparsegpu should cache in"
        ) from None
    return Path(platformdirs.user_cache_dir("sparsegpu", appauthor=False))


def create_beside(directory, prefix: str, suffix: str = "") -> tuple[int, str]:
    """Create a new, empty file with a unique name in ``directory``.

    Parameters
    ----------
    directory : str or os.PathLike
        Where the file is created (beside its destination, so ``os.replace`` is atomic).
    prefix, suffix : str
        The name is ``prefix + <random hex> + suffix``.

    Returns
    -------
    (int, str)
        An open file descriptor (read-write) and the file's path, as :func:`tempfile.mkstemp`;
        the mode is ``0o666`` less the process umask.

    Raises
    ------
    OSError
        The directory is missing or not writable.
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(_ATTEMPTS):
        path = os.path.join(os.fspath(directory), f"{prefix}{secrets.token_hex(6)}{suffix}")
        try:
            return os.open(path, flags, 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(f"{directory}: no unused temporary name {prefix}XXXX{suffix} found")


def save_figure(figure, path) -> Path:
    """Lay a matplotlib figure out tightly, write it to ``path`` (PNG at 120 dpi) and close
    it: how the commands' plots are written."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
