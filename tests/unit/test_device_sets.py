"""Which device a run gets: options.device, then the graph's settings.device, then cpu; auto;
aliases; device sets (target.devices) and every refusal of a bad device string."""

from __future__ import annotations

import pytest

from codefy_jupyter.core.scheduling.device_sets import SubmitError, best_accelerator, parse_device_set, resolve_run_device

GPUS = ["cpu", "cuda:0", "cuda:1", "cuda:2"]


def code(excinfo) -> str:
    return excinfo.value.code


class TestResolveDevice:
    def test_nothing_asked_runs_on_cpu(self):
        r = resolve_run_device(None, None, None, GPUS)
        assert (r.device, r.devices, r.requested, r.warnings) == ("cpu", ("cpu",), None, ())
        assert not r.is_set

    def test_graph_settings_device_when_the_run_names_none(self):
        assert resolve_run_device(None, "cuda:1", None, GPUS).device == "cuda:1"

    def test_the_run_option_beats_the_graph(self):
        r = resolve_run_device("cpu", "cuda:1", None, GPUS)
        assert (r.device, r.requested) == ("cpu", "cpu")

    @pytest.mark.parametrize("name,expected", [
        ("cuda", "cuda:0"), ("CUDA", "cuda:0"), (" cuda:2 ", "cuda:2"), ("cuda:01", "cuda:1"), ("cpu", "cpu"),
    ])
    def test_aliases_share_one_canonical_key(self, name, expected):
        assert resolve_run_device(name, None, None, GPUS).device == expected

    def test_mps_alias(self):
        assert resolve_run_device("mps", None, None, ["cpu", "mps:0"]).device == "mps:0"

    def test_auto_picks_the_lowest_cuda_card_whatever_the_inventory_order(self):
        r = resolve_run_device("auto", None, None, ["cuda:1", "mps:0", "cuda:0"])
        assert (r.device, r.requested, r.warnings) == ("cuda:0", "auto", ())

    def test_auto_prefers_cuda_then_mps(self):
        assert resolve_run_device("AUTO", None, None, ["mps:0", "cpu"]).device == "mps:0"

    def test_auto_without_accelerator_falls_back_to_cpu_with_a_warning(self):
        r = resolve_run_device("auto", None, None, ["cpu"])
        assert r.device == "cpu"
        assert [w.code for w in r.warnings] == ["auto_no_accelerator"]
        assert r.warnings[0].to_dict()["params"] == {"field": "options.device", "device": "cpu"}

    def test_auto_in_graph_settings(self):
        r = resolve_run_device(None, "auto", None, [])
        assert r.device == "cpu" and r.warnings[0].params["field"] == "graph.settings.device"

    def test_cpu_is_always_available(self):
        assert resolve_run_device("cpu", None, None, []).device == "cpu"

    @pytest.mark.parametrize("bad", ["gpu", "cuda:x", "cpu:1", "cuda:-1", "", "cuda0", 3, "cuda/0"])
    def test_bad_device_strings_are_refused(self, bad):
        with pytest.raises(SubmitError) as e:
            resolve_run_device(bad, None, None, GPUS)
        assert code(e) == "device_invalid" and e.value.status == 400
        assert e.value.params["field"] == "options.device"

    def test_bad_graph_device_names_its_field(self):
        with pytest.raises(SubmitError) as e:
            resolve_run_device(None, "tpu", None, GPUS)
        assert e.value.to_dict() == {"code": "device_invalid", "message": e.value.message,
                                     "params": {"field": "graph.settings.device", "device": "tpu"}}

    @pytest.mark.parametrize("option,graph,field", [
        ("cuda:3", None, "options.device"), ("mps", None, "options.device"), (None, "cuda", "graph.settings.device"),
    ])
    def test_an_absent_accelerator_is_refused(self, option, graph, field):
        with pytest.raises(SubmitError) as e:
            resolve_run_device(option, graph, None, ["cpu", "cuda:1"])
        assert code(e) == "device_unavailable"
        assert e.value.params["field"] == field
        assert e.value.params["available"] == ["cpu", "cuda:1"]

    def test_an_empty_device_set_means_no_set(self):
        assert resolve_run_device(None, "cuda:1", [], GPUS).devices == ("cuda:1",)


class TestDeviceSets:
    @pytest.mark.parametrize("option", [None, "auto", "cuda", " Cuda ", "cuda:1"])
    def test_the_first_entry_is_the_device(self, option):
        r = resolve_run_device(option, None, ["cuda:1", "cuda:0"], GPUS)
        assert (r.device, r.devices, r.is_set) == ("cuda:1", ("cuda:1", "cuda:0"), True)
        assert r.requested == option

    def test_graph_settings_device_is_not_consulted(self):
        r = resolve_run_device(None, "not a device", ["cuda:2", "cuda:0"], GPUS)
        assert r.device == "cuda:2"

    def test_any_other_device_is_refused(self):
        with pytest.raises(SubmitError) as e:
            resolve_run_device("cuda:0", None, ["cuda:1", "cuda:0"], GPUS)
        assert code(e) == "device_not_in_set"
        assert e.value.params == {"field": "options.device", "device": "cuda:0", "devices": ["cuda:1", "cuda:0"]}

    @pytest.mark.parametrize("option", ["mps", "cpu"])
    def test_another_kind_is_refused(self, option):
        with pytest.raises(SubmitError) as e:
            resolve_run_device(option, None, ["cuda:0"], GPUS)
        assert code(e) == "device_not_in_set"

    def test_an_invalid_device_with_a_set_is_refused_as_invalid(self):
        with pytest.raises(SubmitError) as e:
            resolve_run_device("gpu", None, ["cuda:0"], GPUS)
        assert code(e) == "device_invalid"

    def test_bare_mps_means_mps0(self):
        r = resolve_run_device("mps", None, ["mps"], ["cpu", "mps:0"])
        assert r.devices == ("mps:0",)

    def test_cpu_set(self):
        assert resolve_run_device("cpu", None, ["cpu"], []).devices == ("cpu",)

    @pytest.mark.parametrize("devices,expected,index", [
        (["cuda:0", "cuda"], "device_set_bare_cuda", 1),
        (["auto"], "device_set_auto", 0),
        (["cuda:0", "cuda:1", "CUDA:0"], "device_set_duplicate", 2),
        (["mps", "mps:0"], "device_set_duplicate", 1),
        (["cuda:0", "cpu"], "device_set_mixed_kinds", 1),
        (["cpu", "mps:0"], "device_set_mixed_kinds", 1),
        (["cuda:0", "tpu:1"], "device_invalid", 1),
        (["cuda:0", 7], "device_invalid", 1),
    ])
    def test_bad_sets_are_refused_naming_the_entry(self, devices, expected, index):
        with pytest.raises(SubmitError) as e:
            resolve_run_device(None, None, devices, ["cpu", "cuda:0", "cuda:1", "mps:0"])
        assert code(e) == expected
        assert e.value.params["field"] == f"options.target.devices[{index}]"

    def test_a_set_device_this_server_lacks_is_refused(self):
        with pytest.raises(SubmitError) as e:
            resolve_run_device(None, None, ["cuda:0", "cuda:5"], GPUS)
        assert code(e) == "device_unavailable"
        assert e.value.params["field"] == "options.target.devices[1]" and e.value.params["device"] == "cuda:5"

    def test_submit_error_shape(self):
        err = SubmitError("x", "msg", {"a": 1})
        assert (err.status, str(err)) == (400, "msg")
        assert err.to_dict() == {"code": "x", "message": "msg", "params": {"a": 1}}
        assert "SubmitError('x'" in repr(err)


def test_best_accelerator():
    assert best_accelerator(["cpu", "mps:0", "cuda:10", "cuda:2"]) == "cuda:2"
    assert best_accelerator(["mps:1", "mps:0"]) == "mps:0"
    assert best_accelerator(["cpu"]) is None


def test_parse_device_set():
    assert parse_device_set([]) == ()
    assert parse_device_set([" CUDA:1", "cuda:0"]) == ("cuda:1", "cuda:0")
    with pytest.raises(SubmitError) as e:
        parse_device_set(["cuda"], field_name="devices")
    assert e.value.params == {"field": "devices[0]", "device": "cuda"}


def test_the_scheduler_module_is_one_import_point():
    from codefy_jupyter.core.scheduling import queue as scheduling
    assert scheduling.resolve_run_device is resolve_run_device and scheduling.SubmitError is SubmitError
