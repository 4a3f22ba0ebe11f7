"""Cluster layout from flags and environment: precedence of flags, and clear errors for bad layouts."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytimely.communication.cluster import Cluster
from pytimely.communication.transport import SocketListener
from pytimely.config import Config, add_arguments, config_from_args
from pytimely.errors import ConfigError

HOSTS = "127.0.0.1:7001,127.0.0.1:7002"


def parse(argv: list[str], env: dict[str, str]) -> Config:
    """The configuration ``argv`` and ``env`` give."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(argv), env)


def test_environment_configures_and_flags_win() -> None:
    env = {
        "PYTIMELY_WORKERS": "3",
        "PYTIMELY_PROCESSES": "2",
        "PYTIMELY_PROCESS": "1",
        "PYTIMELY_HOSTS": HOSTS,
        "PYTIMELY_SECRET": "s3cret-of-enough-length",
    }
    config = parse([], env)
    assert (config.workers, config.processes, config.process, config.peers, config.first_worker) == (3, 2, 1, 6, 3)
    assert config.hosts == (("127.0.0.1", 7001), ("127.0.0.1", 7002))
    assert config.secret == b"s3cret-of-enough-length"
    assert parse(["-w", "2", "-p", "0"], env).first_worker == 0
    assert "s3cret" not in repr(config)


def test_defaults_are_one_local_worker() -> None:
    config = parse([], {})
    assert (config.workers, config.processes, config.process, config.bind) == (1, 1, 0, "127.0.0.1")


def test_hostfile_with_comments_and_secret_file(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("# the cluster\n127.0.0.1:7001  # first\n\n[::1]:7002\n")
    secret = tmp_path / "secret"
    secret.write_text("  from-a-file-long-enough\n")
    config = parse(["-n", "2", "--hostfile", str(hosts), "--secret-file", str(secret)], {})
    assert config.hosts == (("127.0.0.1", 7001), ("::1", 7002))
    assert config.secret == b"from-a-file-long-enough"


@pytest.mark.parametrize(
    ("argv", "env", "match"),
    [
        (["-n", "2"], {"PYTIMELY_SECRET": "x" * 16}, "need 2 host:port entries"),
        (["-n", "2", "--hosts", HOSTS], {}, "shared secret"),
        (["-n", "2", "-p", "2", "--hosts", HOSTS], {"PYTIMELY_SECRET": "x" * 16}, "not in 0..1"),
        (["-w", "0"], {}, "workers must be a positive integer"),
        ([], {"PYTIMELY_WORKERS": "many"}, "PYTIMELY_WORKERS: 'many' is not an integer"),
        (
            ["-n", "2", "--hosts", "127.0.0.1:7001,nope"],
            {"PYTIMELY_SECRET": "x" * 16},
            "entry 2 .'nope'. is not host:port",
        ),
        (["-n", "2", "--hosts", "10.1.2.3:7001,10.1.2.4:7001"], {"PYTIMELY_SECRET": "x" * 16}, "--bind 10.1.2.3"),
        (["--secret-file", "/nonexistent/secret"], {}, "cannot read the secret file"),
        (["-n", "2", "--hosts", HOSTS], {"PYTIMELY_SECRET": "guessable"}, "at least 16 bytes"),
        ([], {"PYTIMELY_HEARTBEAT": "2", "PYTIMELY_TIMEOUT": "3"}, "must exceed two heartbeats"),
        ([], {"PYTIMELY_LISTEN_FD": "three"}, "PYTIMELY_LISTEN_FD: 'three' is not an integer"),
        ([], {"PYTIMELY_LISTEN_FD": "-1"}, "listen_fd must be a file descriptor"),
    ],
)
def test_bad_layouts_are_named(argv: list[str], env: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse(argv, env)


def test_remote_hosts_are_accepted_with_an_explicit_bind() -> None:
    config = parse(
        ["-n", "2", "--hosts", "10.1.2.3:7001,10.1.2.4:7001", "--bind", "0.0.0.0"], {"PYTIMELY_SECRET": "x" * 16}
    )
    assert config.bind == "0.0.0.0"


# --- a listening socket handed down by a launcher (PYTIMELY_LISTEN_FD) ----------------------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A socket listening on a free loopback port."""
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock
    sock.close()


def adopt(fd: int, port: int) -> socket.socket:
    """What a cluster process listens on, given ``fd`` and ``port`` as its own in hosts."""
    config = Config(processes=2, hosts=(("127.0.0.1", port), ("127.0.0.1", 1)), secret=b"s", listen_fd=fd)
    listening = Cluster(config)._listen(backlog=16)
    assert isinstance(listening, SocketListener)
    return listening.sock


def test_an_inherited_listener_is_used_and_accepts_connections(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    assert parse([], {"PYTIMELY_LISTEN_FD": str(listener.fileno())}).listen_fd == listener.fileno()
    adopted = adopt(os.dup(listener.fileno()), port)
    try:
        assert adopted.getsockname()[1] == port
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            peer, _ = adopted.accept()
            peer.close()
    finally:
        adopted.close()


def test_an_inherited_descriptor_that_is_not_our_listener_is_refused_and_left_open(
    listener: socket.socket, tmp_path: Path
) -> None:
    port = listener.getsockname()[1]
    with open(tmp_path / "file", "wb") as f:
        with pytest.raises(ConfigError, match="is not an open socket"):
            adopt(f.fileno(), port)
        f.write(b"still open")
    with pytest.raises(ConfigError, match=f"not a TCP socket listening on port {port + 1}"):
        adopt(listener.fileno(), port + 1)
    listener.getsockname()  # still open: a refused descriptor is not closed
    unbound = socket.socket()
    try:
        with pytest.raises(ConfigError, match="not listening"):
            adopt(unbound.fileno(), port)
    finally:
        unbound.close()
    closed = os.dup(listener.fileno())
    os.close(closed)
    with pytest.raises(ConfigError, match=f"PYTIMELY_LISTEN_FD={closed}"):
        adopt(closed, port)
