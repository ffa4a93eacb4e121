"""The Python client against real servers: the async client on a pytest-jupyter server, the sync
client (and discovery) against a headless `codefy start` server in a subprocess."""

from __future__ import annotations

import json

import pytest
from test_headless import SMALL, servers  # noqa: F401 - the fixture
from test_server_runs import sleepy

from codefy_jupyter.client import AsyncClient, Client, CodefyError, ServerInfo, discover


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}


@pytest.fixture
def aclient(jp_serverapp, jp_base_url, http_server_port, http_server):
    info = ServerInfo(f"http://localhost:{http_server_port[-1]}{jp_base_url}", jp_serverapp.identity_provider.token,
                      "arguments")
    return AsyncClient(server=info)


async def test_async_client_submits_follows_and_reads(aclient):
    run = await aclient.submit(SMALL, name="from the client", seed=None)
    assert run["name"] == "from the client" and run["seed"] is None
    events = [e async for e in aclient.follow(run["id"])]
    assert events[0]["type"] == "execution_start" and events[-1]["type"] == "execution_complete"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    final = await aclient.get(run["id"])
    assert final["status"] == "succeeded"
    page = await aclient.list(limit=5)
    assert page["total"] == 1 and page["runs"][0]["id"] == run["id"]
    assert "Scale" in {n["type"] for n in (await aclient.nodes())["nodes"]}
    await aclient.delete(run["id"])
    with pytest.raises(CodefyError) as info:
        await aclient.get(run["id"])
    assert (info.value.status, info.value.code) == (404, "run_not_found")
    await aclient.close()


async def test_async_client_cancel_and_refusals_carry_the_servers_error(aclient):
    run = await aclient.submit(sleepy(30))
    await aclient.cancel(run["id"])
    events = [e async for e in aclient.follow(run["id"])]
    assert events[-1]["type"] == "execution_stopped"
    with pytest.raises(CodefyError) as info:
        await aclient.submit({"nodes": [{"id": "a", "type": "Nope"}]})
    assert info.value.status == 400 and info.value.code == "invalid_graph"
    with pytest.raises(CodefyError) as info:
        await aclient.submit(SMALL, device="tpu")
    assert info.value.field == "options.device"
    await aclient.close()


async def test_the_client_takes_an_id_prefix_and_shows_candidates_and_suggestions(aclient, jp_serverapp):
    run = await aclient.submit(SMALL)
    got = await aclient.get(run["id"][:12])
    assert got["id"] == run["id"]
    service = await jp_serverapp.extension_manager.extension_points["codefy"].app.ready()
    for run_id in ("c0ffee000001aaaa", "c0ffee000002bbbb"):
        await service.submit({"graph": SMALL}, run_id=run_id)
    with pytest.raises(CodefyError) as info:
        await aclient.get("c0ffee00")
    assert (info.value.status, info.value.code) == (409, "ambiguous_id")
    assert info.value.candidates == ["c0ffee000001aaaa", "c0ffee000002bbbb"] and info.value.field == "run_id"
    assert "c0ffee000001aaaa, c0ffee000002bbbb" in str(info.value)
    with pytest.raises(CodefyError) as info:
        await aclient.submit({"nodes": [{"id": "s", "type": "Scael"}]})
    assert info.value.suggestions == {"s": ["Scale"]} and info.value.candidates == []
    assert "did you mean 'Scale'?" in str(info.value)
    for run_id in (run["id"], "c0ffee000001aaaa", "c0ffee000002bbbb"):
        final = [e async for e in aclient.follow(run_id)]
        assert final[-1]["type"] == "execution_complete"
    await aclient.close()


async def test_a_wrong_token_is_refused(jp_serverapp, jp_base_url, http_server_port, http_server):
    client = AsyncClient(server=ServerInfo(f"http://localhost:{http_server_port[-1]}{jp_base_url}", "wrong", "arguments"))
    with pytest.raises(CodefyError) as info:
        await client.list()
    assert info.value.status == 403
    await client.close()


def test_graph_files_and_their_errors(tmp_path):
    from codefy_jupyter.client import load_graph

    good = tmp_path / "g.json"
    good.write_text(json.dumps(SMALL))
    assert load_graph(good) == SMALL and load_graph(str(good)) == SMALL
    with pytest.raises(CodefyError) as info:
        load_graph(tmp_path / "missing.json")
    assert info.value.code == "file_not_found"
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(CodefyError) as info:
        load_graph(tmp_path / "bad.json")
    assert info.value.code == "invalid_json" and "line 1" in str(info.value)


@pytest.mark.slow
def test_sync_client_finds_the_last_codefy_start_and_runs_a_graph(servers, monkeypatch, tmp_path):  # noqa: F811
    state = servers.start()
    for key in ("CODEFY_URL", "CODEFY_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("CODEFY_DATA_DIR", str(servers.data_dir))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # no other Jupyter servers
    found = discover()
    assert (found.url, found.token, found.source) == (state["url"], state["token"], "codefy start")
    graph_file = tmp_path / "small.json"
    graph_file.write_text(json.dumps(SMALL))
    with Client() as client:
        run = client.submit(graph_file, name="sync")
        final = client.wait(run["id"])
        assert final["status"] == "succeeded" and final["name"] == "sync"
        assert [e["type"] for e in client.follow(run["id"])][-1] == "execution_complete"
    assert servers.stop().returncode == 0
    with pytest.raises(CodefyError) as info:
        discover()
    assert info.value.code == "no_server" and "codefy start" in str(info.value)


def test_an_explicit_url_wins_and_an_unreachable_server_is_named(monkeypatch):
    monkeypatch.delenv("CODEFY_TOKEN", raising=False)
    info = discover(url="http://127.0.0.1:9", token="t")
    assert (info.url, info.token, info.source) == ("http://127.0.0.1:9/", "t", "arguments")
    with Client(url="http://127.0.0.1:9", token="t", timeout=3) as client:
        with pytest.raises(CodefyError) as err:
            client.list()
    assert err.value.code == "unreachable" and "127.0.0.1:9" in str(err.value)


async def test_several_urls_the_client_moves_past_one_that_cannot_be_reached(jp_serverapp, jp_base_url,
                                                                              http_server_port, http_server,
                                                                              monkeypatch):
    """CODEFY_URL="A,B": a leader and its standby. A refuses connections (a control plane that died):
    a submit and a read go to B, which then stays the URL in use; a bad list names the setting."""
    live = f"http://localhost:{http_server_port[-1]}{jp_base_url}"
    monkeypatch.setenv("CODEFY_URL", f"http://127.0.0.1:9/, {live}")
    monkeypatch.setenv("CODEFY_TOKEN", jp_serverapp.identity_provider.token)
    info = discover()
    assert info.urls == ("http://127.0.0.1:9/", live) and "  standbys: " + live in info.describe()
    client = AsyncClient(server=info)
    run = await client.submit(SMALL, name="past the dead one")
    assert client.url == live
    assert (await client.get(run["id"]))["name"] == "past the dead one"
    assert (await client.list())["total"] == 1  # sent once: the refused connection never reached anyone
    await client.close()
    # Only dead URLs: the last one's error.
    with Client(url="http://127.0.0.1:9/,http://127.0.0.1:7/", token="t", timeout=3) as dead:
        with pytest.raises(CodefyError) as err:
            dead.list()
    assert err.value.code == "unreachable" and "127.0.0.1:7" in str(err.value)
    monkeypatch.setenv("CODEFY_URL", "http://a/,ftp://b/")
    with pytest.raises(CodefyError) as err:
        discover()
    assert err.value.code == "invalid_url" and err.value.params == {"field": "CODEFY_URL"}
    assert "'ftp://b/'" in str(err.value)
