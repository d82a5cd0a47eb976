"""Reading a Matrix Market file: scipy's reader and sparsegpu's."""

from __future__ import annotations

import importlib
import os
import tempfile

import scipy.io

from sparsegpu.datasets import synthetic


class MMRead:
    """Read a 500,000-nonzero real general .mtx written in setup."""

    params = (["scipy.io.mmread", "sparsegpu.io.mmread"],)
    param_names = ["reader"]
    timeout = 120

    def setup(self, reader):
        self.folder = None  # teardown runs after a skipped setup too
        if reader == "scipy.io.mmread":
            self.read = scipy.io.mmread
        else:
            try:
                self.read = importlib.import_module("sparsegpu.io").mmread
            except (ImportError, AttributeError):
                raise NotImplementedError("this build of sparsegpu has no sparsegpu.io") from None
        self.folder = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.folder.name, "uniform.mtx")
        scipy.io.mmwrite(self.path, synthetic.uniform_random(50_000, 10, seed=1))

    def teardown(self, reader):
        if self.folder is not None:
            self.folder.cleanup()

    def time_mmread(self, reader):
        self.read(self.path)
