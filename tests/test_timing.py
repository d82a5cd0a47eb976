"""sparsegpu._timing on the CPU: the interleaved CUDA-event timer, with a fake CuPy."""

from __future__ import annotations

import pytest

from sparsegpu import _cuda, _timing


class _FakeCupy:
    """Events that read a clock the timed functions advance; a log of what ran when."""

    def __init__(self):
        self.clock = 0.0
        self.log = []
        fake = self

        class Event:
            def record(self, stream):
                self.at = fake.clock

            def synchronize(self):
                pass

        class Stream:
            def synchronize(self):
                fake.log.append("sync")

        class Cuda:
            pass

        cuda = Cuda()
        cuda.Event = Event
        cuda.get_current_stream = lambda: Stream()
        cuda.get_elapsed_time = lambda start, stop: stop.at - start.at
        self.cuda = cuda


@pytest.fixture
def fake_cupy(monkeypatch):
    fake = _FakeCupy()
    monkeypatch.setattr(_cuda, "cupy_or_none", lambda: fake)
    return fake


def _work(fake, name, ms):
    def fn():
        fake.log.append(name)
        fake.clock += ms

    return fn


def test_each_function_gets_its_own_samples(fake_cupy):
    fns = {"a": _work(fake_cupy, "a", 1.0), "b": _work(fake_cupy, "b", 3.0)}
    timings = _timing.cuda_time_interleaved(fns, warmup=2, repeat=5, inner=4)
    assert list(timings) == ["a", "b"]
    assert timings["a"].samples_ms == (1.0,) * 5  # each sample divided by inner
    assert timings["b"].median_ms == 3.0
    assert fake_cupy.log.count("a") == 2 + 5 * 4 and fake_cupy.log.count("b") == 2 + 5 * 4


def test_samples_alternate_and_the_order_rotates(fake_cupy):
    fns = {k: _work(fake_cupy, k, 1.0) for k in "abc"}
    _timing.cuda_time_interleaved(fns, warmup=1, repeat=3, inner=1)
    timed = fake_cupy.log[fake_cupy.log.index("sync") + 1 :]
    assert timed == list("abc") + list("bca") + list("cab")


def test_a_slow_stretch_falls_on_every_function(fake_cupy):
    # the host slows down 10x for 8 calls: timed one after another, 7 of "a"'s 9 samples
    # would be slow (its median with them); in alternation each gets 4 of 9
    rounds = {"n": 0}

    def make(name, ms):
        def fn():
            slow = 10.0 if 0 <= rounds["n"] < 8 else 1.0  # the first 8 timed calls
            fake_cupy.clock += ms * slow
            rounds["n"] += 1

        return fn

    fns = {"a": make("a", 1.0), "b": make("b", 2.0)}
    rounds["n"] = -4  # the warm-up calls (2 each) come first
    timings = _timing.cuda_time_interleaved(fns, warmup=2, repeat=9, inner=1)
    assert timings["b"].median_ms / timings["a"].median_ms == pytest.approx(2.0)


def test_host_timings_alternate_too():
    log = []
    fns = {k: (lambda k=k: log.append(k)) for k in "ab"}
    timings = _timing.host_time_interleaved(fns, warmup=1, repeat=4, inner=2)
    assert log == ["a", "b"] + list("aabbbbaaaabbbbaa")
    assert all(len(t.samples_ms) == 4 and t.min_ms >= 0 for t in timings.values())


def test_without_a_gpu_it_says_so(monkeypatch):
    monkeypatch.setattr(_cuda, "cupy_or_none", lambda: None)
    with pytest.raises(RuntimeError, match="no GPU"):
        _timing.cuda_time_interleaved({"a": lambda: None})


def test_one_function_alone_is_the_same_timer(fake_cupy):
    timing = _timing.cuda_time(_work(fake_cupy, "a", 2.0), warmup=1, repeat=3, inner=2)
    assert timing.samples_ms == (2.0, 2.0, 2.0)
    assert fake_cupy.log == ["a", "sync"] + ["a"] * 6
    host = _timing.host_time(lambda: None, warmup=0, repeat=4)
    assert len(host.samples_ms) == 4
