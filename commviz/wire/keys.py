"""ZeroMQ CURVE keys: a viewer reachable from other hosts only hears ranks that hold a key.

``commviz keys DIR`` writes two key pairs in ZeroMQ's certificate format: ``server.key`` /
``server.key_secret`` (the viewer's) and ``client.key`` / ``client.key_secret`` (the ranks').
The viewer loads its secret key and accepts the clients whose public keys (``*.key``) are in
DIR; a ZAP authenticator rejects every other peer before any of its messages is read. A rank
needs the server's public key and a client key pair: ``COMMVIZ_KEYS=DIR`` (a copy of DIR
holding ``server.key`` and ``client.key_secret``), or ``COMMVIZ_SERVER_KEY`` and
``COMMVIZ_CLIENT_KEY`` naming those two files. CURVE encrypts the traffic too.

Stdlib and zmq only: the rank side imports this module.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

ENV_KEYS = "COMMVIZ_KEYS"
ENV_SERVER_KEY = "COMMVIZ_SERVER_KEY"
ENV_CLIENT_KEY = "COMMVIZ_CLIENT_KEY"
SERVER, CLIENT = "server", "client"
HOW_TO = ("create keys with `commviz keys` and give the viewer `--keys DIR` "
          f"(the ranks: {ENV_KEYS}=DIR, or {ENV_SERVER_KEY} and {ENV_CLIENT_KEY})")


class KeysError(RuntimeError):
    """Keys missing, unreadable or unusable; the message says what to do."""


@dataclass(frozen=True)
class ServerKeys:
    public: bytes
    secret: bytes
    clients: Path  # the folder whose *.key files are the accepted client public keys


@dataclass(frozen=True)
class ClientKeys:
    server_public: bytes
    public: bytes
    secret: bytes


def default_dir() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config) / "commviz" / "keys"


def check_curve() -> None:
    if not zmq.has("curve"):
        raise KeysError(f"this pyzmq's libzmq {zmq.zmq_version()} was built without CURVE "
                        "security: install a pyzmq wheel from PyPI (it bundles libzmq with "
                        "CURVE), or bind a loopback address")


def generate(folder: str | Path, force: bool = False) -> list[Path]:
    """Write both key pairs into ``folder`` (created, mode 0700); returns the files written."""
    check_curve()
    folder = Path(folder).expanduser()
    names = [folder / f"{who}.{ext}" for who in (SERVER, CLIENT) for ext in ("key", "key_secret")]
    existing = [str(p) for p in names if p.exists()]
    if existing and not force:
        raise KeysError(f"{existing[0]} already exists: keep it, or pass --force to replace "
                        "the keys (every node then needs the new ones)")
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for path in existing:
            os.unlink(path)
        old = os.umask(0o077)  # the secret files are readable by their owner only
        try:
            for who in (SERVER, CLIENT):
                zmq.auth.create_certificates(str(folder), who)
        finally:
            os.umask(old)
    except OSError as exc:
        raise KeysError(f"cannot write keys in {folder}: {exc.strerror}") from None
    return names


def _load(path: Path, secret: bool) -> tuple[bytes, bytes | None]:
    try:
        public, secret_key = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise KeysError(f"cannot read the key file {path}: {exc}") from None
    if secret and secret_key is None:
        raise KeysError(f"{path} holds no secret key (the *.key_secret file is needed)")
    return public, secret_key


def server_keys(folder: str | Path) -> ServerKeys:
    """The viewer's keys from a folder written by ``commviz keys``."""
    check_curve()
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise KeysError(f"{folder}: no such folder of keys; {HOW_TO}")
    public, secret = _load(folder / f"{SERVER}.key_secret", secret=True)
    assert secret is not None
    if not any(p.suffix == ".key" and p.stem != SERVER for p in folder.iterdir()):
        raise KeysError(f"{folder} holds no client public key (*.key): no rank could connect")
    return ServerKeys(public, secret, folder)


def client_keys(environ: Mapping[str, str] = os.environ) -> ClientKeys | None:
    """A rank's keys from its environment; None when none is configured (loopback viewers)."""
    folder = environ.get(ENV_KEYS)
    server = environ.get(ENV_SERVER_KEY) or (folder and os.path.join(folder, f"{SERVER}.key"))
    client = environ.get(ENV_CLIENT_KEY) or (folder and os.path.join(folder,
                                                                      f"{CLIENT}.key_secret"))
    if not server and not client:
        return None
    if not server or not client:
        raise KeysError(f"set both {ENV_SERVER_KEY} and {ENV_CLIENT_KEY} (or {ENV_KEYS})")
    check_curve()
    server_public, _ = _load(Path(server).expanduser(), secret=False)
    public, secret = _load(Path(client).expanduser(), secret=True)
    assert secret is not None
    return ClientKeys(server_public, public, secret)


def secure_client(sock: zmq.Socket, keys: ClientKeys) -> None:
    """Make ``sock`` (before connect) authenticate with ``keys`` and verify the viewer."""
    sock.curve_serverkey = keys.server_public
    sock.curve_publickey = keys.public
    sock.curve_secretkey = keys.secret


def secure_server(sock: zmq.Socket, keys: ServerKeys) -> None:
    """Make ``sock`` (before bind) a CURVE server; an Authenticator decides who may talk."""
    sock.curve_server = True
    sock.curve_publickey = keys.public
    sock.curve_secretkey = keys.secret


def authenticator(ctx: zmq.Context, keys: ServerKeys):
    """Start the ZAP handler of ``ctx``: only the client keys in ``keys.clients`` pass."""
    from zmq.auth.thread import ThreadAuthenticator

    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=str(keys.clients))
    return auth
