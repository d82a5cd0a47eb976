"""The version, and the release that removes the deprecated names."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sparsegpu")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.1.0+source"

# The release (and its date) that removes every deprecated name: ``sparsegpu.plan``,
# ``sparsegpu.tuning.AdaptivePolicy`` and the backend name ``adaptive``. Each one's
# DeprecationWarning says it, and so does the CHANGELOG's "Deprecated" section.
REMOVED_IN = "sparsegpu 0.3 (2027-06-01)"
