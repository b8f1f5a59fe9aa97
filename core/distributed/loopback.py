"""Keep Ray on the address ddrl is told to use (127.0.0.1 by default), with token auth on.

Ray 2.60 never lets a node be 127.0.0.1 on Linux: wherever it meets a loopback address (``ray
start --node-ip-address``, ``ray.init(_node_ip_address=...)``, the host of a bootstrap address)
it swaps in the machine's outward address (``services.resolve_ip_for_localhost``, which asks
``services.get_node_ip_address``). Measured here: a head started with ``--node-ip-address
127.0.0.1`` registered as 192.0.2.2, its GCS and raylets listened on every interface, and a driver
joining ``127.0.0.1:6399`` was sent to 192.0.2.2:6399 and refused. With the node address pinned
to 127.0.0.1, every Ray server (GCS, raylets, agents, workers) listens on 127.0.0.1 only.

Ray's own switch for that (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``) is read once at import and
also forbids ``ray start --address``, i.e. any second node; so ddrl pins the one function Ray asks
instead, in the processes ddrl starts (the driver, and ``python -m ddrl.cluster start``). The
processes Ray starts from there get the address on their command lines.

Token authentication: a new local instance turns it on by itself, but a driver or node joining a
cluster does so only when ``RAY_AUTH_MODE=token`` is set, and is refused otherwise
(``InvalidAuthToken``). ddrl sets it unless the environment says otherwise; the token is read
from ``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` names, or ``~/.ray/auth_token`` (which
the head writes on its machine).
"""
import os

LOOPBACK = "127.0.0.1"


def pin_node_ip(ip=LOOPBACK):
    """Make Ray in this process take ``ip`` as this machine's node address."""
    from ray._private import services

    def node_ip(address=None):  # Ray's signature; the answer no longer depends on it
        return ip

    services.get_node_ip_address = node_ip


def token_auth_on():
    """RAY_AUTH_MODE=token unless set, re-read by Ray in this process and inherited by what it
    starts (what Ray's own ``_enable_token_auth`` does for a new local instance)."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    from ray._raylet import Config
    Config.initialize("")


def ensure_token():
    """A head needs a token to hand out: ``ray start --head`` refuses to start without one
    (only ``ray.init`` makes one), so on a fresh machine make one as ``ray get-auth-token
    --generate`` does, in ~/.ray/auth_token, unless RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH gives
    it. Returns the file written, or None when a token was there already."""
    from ray._private.authentication.authentication_token_setup import (
        _get_default_token_path, generate_and_save_token)
    from ray._raylet import AuthenticationTokenLoader
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token":
        return None
    loader = AuthenticationTokenLoader.instance()
    if loader.has_token(ignore_auth_mode=True):
        return None
    generate_and_save_token()
    loader.reset_cache()
    path = str(_get_default_token_path())
    print(f"ddrl: no Ray token found; generated one in {path} (nodes and drivers that join "
          f"this head need it: see README, 'Scaling out')", flush=True)
    return path


def prepare(ip=LOOPBACK):
    """Everything above, before ``ray.init`` or ``ray start`` in this process."""
    pin_node_ip(ip)
    token_auth_on()


def node_addresses():
    """The address every live node of the connected cluster reports."""
    import ray
    return sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
