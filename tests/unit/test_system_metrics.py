"""The per-run system metrics sampler (wire/system_metrics.py) with hand-written fakes at its two
edges: psutil's process (a declared CPU and memory reading) and NVML (declared cards, as on a GPU
machine this CPU machine is not). Samples are taken by calling `sample()` where the thread's timing
does not matter; the thread itself is waited on by condition."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from codefy_jupyter.agent.isolation import OfferedDevice, Visibility
from codefy_jupyter.agent.system_sampling import interval_from, run_cards
from codefy_jupyter.cli.runs import system_rows
from codefy_jupyter.core.runs.system_sampling import local_cards
from codefy_jupyter.wire import system_metrics as sm

GIB = 1 << 30


class FakeProcess:
    def __init__(self, cpu: list[float], rss: int) -> None:
        self.cpu, self.rss, self.calls = list(cpu), rss, 0

    def cpu_percent(self) -> float:
        self.calls += 1
        return self.cpu.pop(0) if self.cpu else 0.0

    def memory_info(self):
        return SimpleNamespace(rss=self.rss)


class FakePsutil:
    def __init__(self, process: FakeProcess) -> None:
        self.process, self.pids = process, []

    def Process(self, pid=None):  # noqa: N802 - psutil's name
        self.pids.append(pid)
        return self.process


class FakeNvml:
    """Declared cards: index -> (uuid, utilization %, memory used)."""

    def __init__(self, cards: dict[int, tuple[str, int, int]], *, starts: bool = True,
                 no_util: frozenset[int] = frozenset()) -> None:
        self.cards, self.starts, self.no_util = cards, starts, no_util
        self.inits = self.shutdowns = 0

    def nvmlInit(self):  # noqa: N802 - pynvml's names
        if not self.starts:
            raise RuntimeError("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self):  # noqa: N802
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
        if index not in self.cards:
            raise RuntimeError("Invalid Argument")
        return ("card", index)

    def nvmlDeviceGetHandleByUUID(self, uuid):  # noqa: N802
        for index, (card_uuid, _, _) in self.cards.items():
            if card_uuid == uuid:
                return ("card", index)
        raise RuntimeError("Not Found")

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        if handle[1] in self.no_util:
            raise RuntimeError("Not Supported")
        return SimpleNamespace(gpu=self.cards[handle[1]][1], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        return SimpleNamespace(used=self.cards[handle[1]][2], total=80 * GIB, free=0)


def opened(psutil, nvml, pid=4242) -> sm.SystemSampler:
    sampler = sm.SystemSampler(interval_s=1.0, psutil=psutil, nvml=nvml, pid=pid)
    sampler._open()
    return sampler


def test_a_sample_has_the_process_and_each_of_the_runs_cards_under_its_own_name():
    nvml = FakeNvml({0: ("GPU-aaaa", 37, 3 * GIB), 2: ("GPU-cccc", 91, 5 * GIB)})
    psutil = FakePsutil(FakeProcess([0.0, 250.0, 120.0], rss=700 * (1 << 20)))
    sampler = opened(psutil, nvml)
    got: list[list[dict]] = []
    sampler.add("r1", {"cuda:0": "GPU-aaaa", "cuda:2": "2"}, got.append)
    sampler.sample()
    sampler.sample()
    assert psutil.pids == [4242]
    first = {p["name"]: p for p in got[0]}
    assert first == {
        "system/cpu_percent": {"name": "system/cpu_percent", "value": 0.0, "step": 0},
        "system/rss_bytes": {"name": "system/rss_bytes", "value": 700.0 * (1 << 20), "step": 0},
        "system/gpu_util_percent/cuda:0": {"name": "system/gpu_util_percent/cuda:0", "value": 37.0, "step": 0},
        "system/gpu_memory_bytes/cuda:0": {"name": "system/gpu_memory_bytes/cuda:0", "value": 3.0 * GIB, "step": 0},
        "system/gpu_util_percent/cuda:2": {"name": "system/gpu_util_percent/cuda:2", "value": 91.0, "step": 0},
        "system/gpu_memory_bytes/cuda:2": {"name": "system/gpu_memory_bytes/cuda:2", "value": 5.0 * GIB, "step": 0},
    }
    assert {p["step"] for p in got[1]} == {1}
    assert {p["name"]: p["value"] for p in got[1]}["system/cpu_percent"] == 250.0
    note = sampler.remove("r1")
    assert note == {"interval_s": 1.0, "process": "the run's own process", "gpu": "sampled: cuda:0, cuda:2",
                    "samples": 2}
    sampler.sample()
    assert len(got) == 2  # removed: nothing more for it


def test_runs_sharing_a_sampler_each_count_their_own_steps_and_see_only_their_cards():
    nvml = FakeNvml({0: ("GPU-aaaa", 10, GIB), 1: ("GPU-bbbb", 20, 2 * GIB)})
    sampler = opened(FakePsutil(FakeProcess([], rss=1)), nvml, pid=None)
    a: list[list[dict]] = []
    b: list[list[dict]] = []
    sampler.add("a", {"cuda:0": "0"}, a.append)
    sampler.sample()
    sampler.add("b", {"cuda:1": "1"}, b.append)
    sampler.sample()
    assert [p["step"] for p in a[1]] == [1] * len(a[1])
    assert [p["step"] for p in b[0]] == [0] * len(b[0])
    assert not any("cuda:1" in p["name"] for batch in a for p in batch)
    assert {p["name"] for p in b[0]} == {"system/cpu_percent", "system/rss_bytes",
                                         "system/gpu_util_percent/cuda:1", "system/gpu_memory_bytes/cuda:1"}


def test_without_nvml_there_are_no_gpu_values_and_the_note_says_why():
    for nvml in (None, FakeNvml({0: ("GPU-aaaa", 1, 1)}, starts=False)):
        sampler = opened(FakePsutil(FakeProcess([5.0, 5.0], rss=10)), nvml)
        got: list[list[dict]] = []
        sampler.add("r", {"cuda:0": "0"}, got.append)
        sampler.sample()
        assert {p["name"] for p in got[0]} == {"system/cpu_percent", "system/rss_bytes"}
        assert sampler.remove("r")["gpu"] == "unavailable (no NVML)"


def test_a_cpu_run_has_no_card_and_a_card_nvml_does_not_know_or_cannot_measure_is_left_out():
    nvml = FakeNvml({0: ("GPU-aaaa", 50, GIB)}, no_util=frozenset({0}))
    sampler = opened(FakePsutil(FakeProcess([], rss=10)), nvml)
    sampler.add("cpu-run", {}, lambda points: None)
    assert sampler.remove("cpu-run")["gpu"] == "none (the run has no CUDA card)"  # known without a sample
    got: list[list[dict]] = []
    sampler.add("mig", {"cuda:0": "0"}, got.append)
    sampler.sample()
    names = {p["name"] for p in got[0]}
    assert "system/gpu_memory_bytes/cuda:0" in names and "system/gpu_util_percent/cuda:0" not in names
    sampler.add("lost", {"cuda:7": "GPU-zzzz"}, got.append)
    sampler.sample()
    assert sampler.remove("lost")["gpu"] == "unavailable (NVML does not know the run's cards)"


def test_a_run_that_ended_before_its_first_sample_says_so():
    sampler = opened(FakePsutil(FakeProcess([], rss=10)), FakeNvml({0: ("GPU-aaaa", 1, 1)}))
    sampler.add("short", {"cuda:0": "0"}, lambda points: None)
    note = sampler.remove("short")
    assert note["gpu"] == sm.NOT_YET and note["samples"] == 0


def test_a_process_that_ended_stops_its_readings_not_the_cards():
    class Gone(FakeProcess):
        def cpu_percent(self):
            raise ProcessLookupError(4242)

    sampler = opened(FakePsutil(Gone([], rss=1)), FakeNvml({0: ("GPU-aaaa", 9, GIB)}))
    got: list[list[dict]] = []
    sampler.add("r", {"cuda:0": "0"}, got.append)
    sampler.sample()
    assert {p["name"] for p in got[0]} == {"system/gpu_util_percent/cuda:0", "system/gpu_memory_bytes/cuda:0"}


def test_the_thread_samples_while_runs_are_added_and_shuts_nvml_down_when_stopped():
    nvml = FakeNvml({0: ("GPU-aaaa", 5, GIB)})
    process = FakeProcess([], rss=123)
    sampler = sm.SystemSampler(interval_s=0.01, psutil=FakePsutil(process), nvml=nvml).start()
    got: list[list[dict]] = []
    enough = threading.Event()

    def emit(points):
        got.append(points)
        if len(got) >= 3:
            enough.set()

    sampler.add("r", {"cuda:0": "0"}, emit)
    assert enough.wait(60), "the sampler never took three samples"
    assert [batch[0]["step"] for batch in got[:3]] == [0, 1, 2]
    note = sampler.remove("r")
    assert note["samples"] >= 3
    sampler.stop()
    deadline = time.monotonic() + 60
    while sampler._thread.is_alive():
        assert time.monotonic() < deadline
        sampler._thread.join(0.1)
    assert nvml.inits == 1 and nvml.shutdowns == 1


def test_peaks_of_the_system_series_only():
    points = [{"name": "system/cpu_percent", "value": 20.0}, {"name": "system/cpu_percent", "value": 180.0},
              {"name": "system/rss_bytes", "value": 2.0 * GIB}, {"name": "loss", "value": 9.0},
              {"name": "system/gpu_util_percent/cuda:1", "value": 77.0}]
    peaks = sm.summary(points)
    assert peaks == {"system/cpu_percent": 180.0, "system/rss_bytes": 2.0 * GIB,
                     "system/gpu_util_percent/cuda:1": 77.0}
    rows = dict(system_rows(peaks, {"interval_s": 2.0, "gpu": "sampled: cuda:1"}))
    assert rows["System"] == "sampled every 2 s"
    assert rows["  peak CPU"] == "180 %" and rows["  peak RSS"] == "2.0 GiB"
    assert rows["  peak GPU cuda:1"] == "77 %" and "  GPU" not in rows
    cpu_only = dict(system_rows({"system/rss_bytes": 1024.0}, {"interval_s": 5, "gpu": "unavailable (no NVML)"}))
    assert cpu_only["  GPU"] == "unavailable (no NVML)"
    assert system_rows({}, None) == []


def test_the_cards_a_run_is_sampled_on():
    assert local_cards("cpu", {}) == {}
    assert local_cards("cuda:1", {}) == {"cuda:1": "1"}
    assert local_cards("cuda:1", {"CUDA_VISIBLE_DEVICES": "3,GPU-abcd"}) == {"cuda:1": "GPU-abcd"}
    assert local_cards("cuda:2", {"CUDA_VISIBLE_DEVICES": "3"}) == {}
    offered = {"cuda:0": OfferedDevice("cuda:0", "0", uuid="GPU-aaaa"), "cuda:2": OfferedDevice("cuda:2", "2")}
    view = Visibility("cuda:0", "0,2", ["cuda:0", "cuda:2"], {"cuda:0": "cuda:0", "cuda:1": "cuda:2"})
    assert run_cards(view, offered) == {"cuda:0": "GPU-aaaa", "cuda:2": "2"}
    assert run_cards(Visibility("cpu", ""), offered) == {}


@pytest.mark.parametrize(("raw", "expected"), [("", 5.0), ("0", 0.0), ("0.5", 0.5), ("fast", 5.0), ("nan", 5.0)])
def test_the_agents_interval_comes_from_its_environment(raw, expected):
    assert interval_from({"CODEFY_SYSTEM_METRICS_INTERVAL_S": raw}) == expected


def test_the_setting_is_a_number_and_a_malformed_one_is_refused_naming_its_variable():
    from codefy_jupyter.core.config import ConfigError, Settings

    assert Settings().system_metrics_interval_s == 5.0
    assert Settings.load(env={"CODEFY_SYSTEM_METRICS_INTERVAL_S": "0.25"}).system_metrics_interval_s == 0.25
    assert Settings.load({"system_metrics_interval_s": 0}, env={}).system_metrics_interval_s == 0.0
    for bad in ("often", "inf", True):
        with pytest.raises(ConfigError, match="CODEFY_SYSTEM_METRICS_INTERVAL_S"):
            Settings.load({"system_metrics_interval_s": bad}, env={})
