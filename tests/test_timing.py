"""sparsegpu.measure._timing on the CPU: the interleaved CUDA-event timer, with a fake CuPy."""

from __future__ import annotations

import types

import pytest

from sparsegpu.device import _cuda
from sparsegpu.measure import _timing


def _fake_cuda(event_type, stream_type):
    """A ``cupy.cuda`` of these events and streams; an event records its time as ``at``."""
    return types.SimpleNamespace(
        Event=event_type,
        get_current_stream=stream_type,
        get_elapsed_time=lambda start, stop: stop.at - start.at,
    )


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

        self.cuda = _fake_cuda(Event, Stream)


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
    # warm-up, then per sample one lead call and the timed ones
    assert fake_cupy.log.count("a") == 2 + 5 * 5 and fake_cupy.log.count("b") == 2 + 5 * 5


def test_samples_alternate_and_the_order_rotates(fake_cupy):
    fns = {k: _work(fake_cupy, k, 1.0) for k in "abc"}
    _timing.cuda_time_interleaved(fns, warmup=1, repeat=3, inner=1)
    timed = fake_cupy.log[fake_cupy.log.index("sync") + 1 :]
    # each sample: its lead call, then its timed one
    assert timed == [name for name in "abcbcacab" for _ in range(2)]


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
    assert fake_cupy.log == ["a", "sync"] + ["a"] * 9  # 3 samples of a lead and 2 timed
    host = _timing.host_time(lambda: None, warmup=0, repeat=4)
    assert len(host.samples_ms) == 4


def test_before_sample_runs_untimed_before_every_sample(fake_cupy):
    """Distributed timing's barrier: after the lead call (none here), before the clock."""
    fake = fake_cupy

    def barrier():
        fake.log.append("barrier")
        fake.clock += 100.0  # a slow rank: not in the sample

    fns = {"a": _work(fake, "a", 2.0)}
    timing = _timing.cuda_time_interleaved(
        fns, warmup=1, repeat=3, inner=2, lead=False, before_sample=barrier
    )
    assert timing["a"].samples_ms == (2.0, 2.0, 2.0)
    assert fake.log == ["a", "sync"] + ["barrier", "a", "a"] * 3
    log = []
    _timing.host_time_interleaved(
        {"b": lambda: log.append("b")}, warmup=0, repeat=2, before_sample=lambda: log.append("|")
    )
    assert log == ["|", "b", "|", "b"]


def test_the_public_names_are_the_harness():
    """``sparsegpu.measure`` exports the one harness and answer check, not copies."""
    from sparsegpu import measure
    from sparsegpu.measure import _oracle

    assert measure.cuda_time is _timing.cuda_time
    assert measure.time_candidates is _timing.time_candidates
    assert measure.Oracle is _oracle.Oracle
    assert set(measure.__all__) <= set(dir(measure))


class _Timeline:
    """One stream: the host issues launches (each costing it ``latency`` ms) and events;
    the GPU runs them in order, each once it has arrived and the GPU is free. Times in
    ms."""

    def __init__(self, latency):
        self.host = self.gpu = 0.0
        self.latency = latency
        self.queue = []  # (issued at, kernel ms or the event) not yet run
        timeline = self

        class Event:
            def record(self, stream):
                timeline.host += 0.001
                timeline.queue.append((timeline.host, self))

            def synchronize(self):
                timeline.run()
                timeline.host = max(timeline.host, self.at)

        class Stream:
            def synchronize(self):
                timeline.run()
                timeline.host = max(timeline.host, timeline.gpu)

        self.cuda = _fake_cuda(Event, Stream)

    def launch(self, ms):
        self.host += self.latency
        self.queue.append((self.host, ms))

    def run(self):
        for issued, what in self.queue:
            self.gpu = max(self.gpu, issued)
            if isinstance(what, float):
                self.gpu += what
            else:
                what.at = self.gpu
        self.queue = []


@pytest.mark.parametrize("latency", [0.005, 0.02])
def test_a_sample_leaves_the_first_launch_latency_out(monkeypatch, latency):
    # one 0.08 ms product a sample, each launch 5-20 us of the host's time: without the
    # lead call every sample after the synchronisation would read 0.08 + latency
    timeline = _Timeline(latency)
    monkeypatch.setattr(_cuda, "cupy_or_none", lambda: timeline)
    timing = _timing.cuda_time(lambda: timeline.launch(0.08), warmup=1, repeat=5, inner=1)
    assert timing.median_ms == pytest.approx(0.08)
    # a loop the host cannot keep up with is timed at the host's pace
    host_bound = _timing.cuda_time(lambda: timeline.launch(0.001), warmup=1, repeat=3, inner=10)
    assert host_bound.median_ms == pytest.approx(latency, rel=0.05)


def test_a_read_stopwatch_gives_its_events_to_the_next(cupy):
    """A stopwatch's events, once read, serve the thread's next stopwatches (no event made
    per product); a read stopwatch keeps its reading."""
    first = _timing.Stopwatch(on_host=False)
    cupy.arange(1000).sum()
    first.stop()
    events = {id(first._start), id(first._stop)}
    ms = first.ms()
    assert ms >= 0 and first.ms() == ms
    second = _timing.Stopwatch(on_host=False).stop()
    assert {id(second._start), id(second._stop)} == events
    assert second.ms() >= 0 and first.ms() == ms


def test_a_stopwatch_on_the_host_reads_the_clock():
    watch = _timing.Stopwatch(on_host=True).stop()
    assert watch.ms() >= 0 and watch.ms(wait=False) >= 0


class _EventsCupy:
    """Events that finish when the test says (``done``); how many were made, and whether a
    read waited on one that had not finished."""

    def __init__(self):
        self.made = 0
        self.clock = 0.0
        fake = self

        class Event:
            def __init__(self):
                fake.made += 1
                self.done = False

            def record(self, stream=None):
                self.at = fake.clock
                self.done = False

            def synchronize(self):
                assert self.done, "a read waited on a stopwatch still running"

        self.cuda = _fake_cuda(Event, None)
        self.cuda.runtime = types.SimpleNamespace(getDevice=lambda: 0)

    def finish(self, *watches):
        for watch in watches:
            watch._start.done = watch._stop.done = True


@pytest.fixture
def events_cupy(monkeypatch):
    fake = _EventsCupy()
    monkeypatch.setattr(_cuda, "cupy_or_none", lambda: fake)
    monkeypatch.setattr(_timing, "_spare_events", __import__("threading").local())
    return fake


def test_a_first_stopwatch_makes_its_stop_event_with_its_start(events_cupy):
    # the stop comes after the product's kernels were queued: no event is made then
    watch = _timing.Stopwatch(on_host=False)
    assert events_cupy.made == 2
    watch.stop()
    assert events_cupy.made == 2


def test_finished_stopwatches_nobody_read_give_their_events_to_the_next(events_cupy):
    """A first product of each new pattern leaves its stopwatch unread (its pair reads it
    at the pattern's next product); once finished, its events serve the next stopwatch,
    and its reading is kept for the pair."""
    first = _timing.Stopwatch(on_host=False)
    events_cupy.clock = 0.5
    first.stop()
    events = {id(first._start), id(first._stop)}
    events_cupy.finish(first)
    second = _timing.Stopwatch(on_host=False).stop()
    assert events_cupy.made == 2
    assert {id(second._start), id(second._stop)} == events
    assert first.ms(wait=False) == 0.5 and first.ms() == 0.5


def test_a_stopwatch_still_running_is_not_waited_for(events_cupy):
    first = _timing.Stopwatch(on_host=False).stop()
    second = _timing.Stopwatch(on_host=False).stop()  # the first is still running
    assert events_cupy.made == 4
    assert first.ms(wait=False) is None and second._start is not first._start
    events_cupy.finish(first, second)
    assert first.ms(wait=False) == 0.0


def test_the_walk_stops_at_the_first_stopwatch_still_running(events_cupy):
    watches = [_timing.Stopwatch(on_host=False).stop() for _ in range(3)]
    events_cupy.finish(watches[1], watches[2])  # the oldest one still runs
    _timing.Stopwatch(on_host=False)
    assert all(w._ms is None for w in watches)
    assert events_cupy.made == 8


def test_events_of_a_stopwatch_collected_as_cyclic_garbage_never_come_back(events_cupy):
    """CuPy's Event frees its handle in __del__; a stopwatch in a reference cycle (a
    forgotten pair's) is collected with every finalizer in its garbage run, so a stopwatch
    that gave its events back from a finalizer handed out freed ones (a segfault at the
    next record on the H200). Dropped stopwatches free their events; only read ones serve
    again."""
    import gc
    import itertools

    serials, freed = itertools.count(), set()

    class Event(events_cupy.cuda.Event):
        def __init__(self):
            super().__init__()
            self.serial = next(serials)

        def __del__(self):
            freed.add(self.serial)

        def record(self, stream=None):
            assert self.serial not in freed, "an event whose handle was freed was recorded"
            super().record(stream)

    events_cupy.cuda.Event = Event
    watch = _timing.Stopwatch(on_host=False).stop()
    events = {watch._start.serial, watch._stop.serial}
    holder = {"watch": watch}
    holder["self"] = holder  # a cycle: only the collector frees it
    del watch, holder
    gc.collect()
    assert events <= freed
    again = _timing.Stopwatch(on_host=False).stop()
    kept = {again._start.serial, again._stop.serial}
    assert not kept & freed
    events_cupy.finish(again)
    assert again.ms() == 0.0
    read = _timing.Stopwatch(on_host=False).stop()  # a read one's events do serve again
    assert {read._start.serial, read._stop.serial} == kept
