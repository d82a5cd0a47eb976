"""sparsegpu.device._launch on the CPU: the type map, and what a launch packs into its argument
slots (the driver is replaced by a recorder; the GPU suite runs the real launches)."""

from __future__ import annotations

import ctypes
import sys
import types

import numpy as np
import pytest

from sparsegpu.device import _launch


class _Pointer:
    def __init__(self, ptr):
        self.ptr = ptr


class _DeviceArray:
    def __init__(self, ptr):
        self.data = _Pointer(ptr)


@pytest.fixture
def launches(monkeypatch):
    """Every launch through a recording driver, as (function, grid, block, shared bytes,
    stream, the first five slot values), on a fake current stream 77."""
    calls = []

    def launch_kernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        values = [ctypes.c_uint64.from_address(slots[i]).value for i in range(5)]
        calls.append((function, gx, bx, shared, stream, values))

    api = types.ModuleType("cupy_backends.cuda.api")
    api.driver = types.SimpleNamespace(launchKernel=launch_kernel)
    for name in ("cupy_backends", "cupy_backends.cuda"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.api", api)
    stream = types.SimpleNamespace(ptr=77)
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(get_current_stream=lambda: stream))
    monkeypatch.setattr(_launch._cuda, "cupy_or_none", lambda: cupy)
    return calls


def test_name_expression_spells_the_common_header_types():
    expected = "k<complex64, long long, 8, 1>"
    assert _launch.name_expression("k", np.complex64, np.int64, 8, 1) == expected
    assert _launch.name_expression("k", np.float64) == "k<double>"


def test_a_launch_fills_fixed_and_per_call_slots(launches):
    kernel = types.SimpleNamespace(kernel=_Pointer(1234))
    launch = _launch.KernelLaunch(
        kernel, 128, (_DeviceArray(0x1000), "x", np.int64(5), "texture", 2**40), shared_bytes=512
    )
    launch(9, x=_DeviceArray(0x2000), texture=_Pointer(42))
    launch(3, x=_DeviceArray(0x3000), texture=0)
    assert launches == [
        (1234, 9, 128, 512, 77, [0x1000, 0x2000, 5, 42, 2**40]),
        (1234, 3, 128, 512, 77, [0x1000, 0x3000, 5, 0, 2**40]),
    ]


def test_the_per_product_launch_writes_x_y_and_the_texture_slot(launches):
    kernel = types.SimpleNamespace(kernel=_Pointer(99))
    plain = _launch.KernelLaunch(kernel, 64, (_DeviceArray(0x10), "x", 0, "y", 7))
    textured = _launch.KernelLaunch(kernel, 64, (_DeviceArray(0x10), "x", "x_texture", "y", 7))
    plain.xy(5, _DeviceArray(0x20), _DeviceArray(0x30))
    textured.xy(6, _DeviceArray(0x40), _DeviceArray(0x50), 1234)
    textured.xy(6, _DeviceArray(0x60), _DeviceArray(0x70), 4321)
    assert launches == [
        (99, 5, 64, 0, 77, [0x10, 0x20, 0, 0x30, 7]),
        (99, 6, 64, 0, 77, [0x10, 0x40, 1234, 0x50, 7]),
        (99, 6, 64, 0, 77, [0x10, 0x60, 4321, 0x70, 7]),
    ]


def test_a_kernel_without_x_takes_the_per_product_launch_and_only_y(launches):
    """A fix-up of y alone launches through xy() like the main kernel (its x is written to
    a spare slot past the parameters, which the launch never passes)."""
    kernel = types.SimpleNamespace(kernel=_Pointer(7))
    fixup = _launch.KernelLaunch(kernel, 32, (_DeviceArray(0x10), 3, 4, "y", 5))
    fixup.xy(2, _DeviceArray(0x20), _DeviceArray(0x30))
    fixup.xy(2, _DeviceArray(0x40), _DeviceArray(0x50))
    assert launches == [
        (7, 2, 32, 0, 77, [0x10, 3, 4, 0x30, 5]),
        (7, 2, 32, 0, 77, [0x10, 3, 4, 0x50, 5]),
    ]
    assert fixup._params.shape == (5,)  # the spare slot is not among the parameters
