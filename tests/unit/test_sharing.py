"""Who counts as several people: the shared-server decision."""

from codefy_jupyter.server.sharing import decide_sharing

TOKEN = "jupyter_server.auth.identity.IdentityProvider"


def test_a_token_server_is_one_persons():
    s = decide_sharing(None, [], {}, TOKEN)
    assert not s.shared and s.admins == frozenset()


def test_a_jupyterhub_server_is_shared_and_its_owner_is_an_admin():
    s = decide_sharing(None, ["boss"], {"JUPYTERHUB_USER": "alice"}, "jupyterhub.singleuser.HubIdentityProvider")
    assert s.shared and s.admins == {"alice", "boss"} and "alice" in s.reason


def test_a_multi_user_identity_provider_means_shared():
    s = decide_sharing(None, [], {}, "fake_identity.HeaderIdentityProvider")
    assert s.shared and "fake_identity.HeaderIdentityProvider" in s.reason


def test_configuration_wins_over_detection_both_ways():
    assert not decide_sharing(False, [], {"JUPYTERHUB_USER": "alice"}, "x.Y").shared
    forced = decide_sharing(True, ["boss"], {}, TOKEN)
    assert forced.shared and forced.admins == {"boss"}


def test_an_empty_hub_user_is_not_a_hub():
    assert not decide_sharing(None, [], {"JUPYTERHUB_USER": ""}, TOKEN).shared


HUB = "jupyterhub.singleuser.extension.JupyterHubIdentityProvider"


def test_hub_admins_and_admin_groups_are_admins_of_a_hub_server():
    s = decide_sharing(None, [], {"JUPYTERHUB_USER": "alice"}, HUB, admin_groups=["gpu-admins"])
    assert s.is_admin("alice")  # the server's owner
    assert not s.is_admin("bob", {"name": "bob", "admin": False, "groups": ["students"]})
    assert s.is_admin("carol", {"name": "carol", "admin": True, "groups": []})
    assert s.is_admin("dave", {"name": "dave", "admin": False, "groups": ["students", "gpu-admins"]})
    assert not s.is_admin("bob")  # no Hub model: only the listed names


def test_a_hub_model_of_someone_else_grants_nothing():
    s = decide_sharing(None, [], {"JUPYTERHUB_USER": "alice"}, HUB, admin_groups=["gpu-admins"])
    assert not s.is_admin("bob", {"name": "carol", "admin": True, "groups": ["gpu-admins"]})
    assert not s.is_admin(None, {"name": None, "admin": True, "groups": ["gpu-admins"]})


def test_on_a_one_person_server_everyone_signed_in_is_the_admin():
    assert decide_sharing(None, [], {}, TOKEN, admin_groups=["gpu-admins"]).is_admin(None)
