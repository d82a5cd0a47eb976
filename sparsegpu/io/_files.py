"""Files sparsegpu creates: made beside their destination, with the permissions of ``open``.

:func:`tempfile.mkstemp` creates files readable by their owner only (0600) whatever the
umask; a file renamed into place from one keeps that mode, so a matrix written or cached
by one user could not be read by another. :func:`create_beside` creates the temporary
file with mode ``0o666 & ~umask``, as ``open(path, "w")`` and scipy do.
"""

from __future__ import annotations

import os
import secrets

_ATTEMPTS = 100


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
